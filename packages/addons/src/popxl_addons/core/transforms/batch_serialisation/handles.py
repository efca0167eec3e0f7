"""Where a serialised graph loads from and stores to, and the slot of each step."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import popxl
from popxl import ops

RowOffset = int | None | Callable[[popxl.Tensor], popxl.Tensor]


@dataclass
class RemoteHandle:
    """A remote buffer seen as a matrix of `rows` x `steps` entries, plus the row to use.

    `row_offset` is an int (added to the row the serialised graph is called
    with), None (always row 0) or a function from the called row (an int32
    scalar tensor) to the row to use. `shard_group` shards the tensors over a
    replica group (replicated tensor sharding).
    """

    buffer: popxl.RemoteBuffer
    row_offset: RowOffset = 0
    shard_group: popxl.ReplicaGrouping | None = None

    def min_entries(self, steps: int, rows: int) -> int:
        """Entries the buffer needs for `rows` rows of `steps` steps with this offset."""
        if self.row_offset is None:
            return steps
        if isinstance(self.row_offset, int):
            return steps * (self.row_offset + rows)
        return steps * rows

    def grow(self, steps: int, rows: int) -> None:
        """Enlarge the buffer to hold `rows` rows of `steps` steps."""
        self.buffer.entries = max(self.buffer.entries, self.min_entries(steps, rows))

    def slot(self, index: popxl.Tensor, steps: int) -> popxl.Tensor:
        """The buffer entry for running index `index` = row * steps + step."""
        if self.row_offset is None:
            return index % steps
        if isinstance(self.row_offset, int):
            return index + self.row_offset * steps if self.row_offset else index
        row = self.row_offset(index / steps)
        if not isinstance(row, popxl.Tensor) or row.shape != () or not row.dtype.is_int:
            raise TypeError(f"A row_offset function must return a scalar integer tensor, got {row!r}")
        row = ops.cast(row, popxl.int32) if row.dtype is not popxl.int32 else row
        return row * steps + index % steps

    @property
    def sharded(self) -> bool:
        """Whether tensors go through this handle as replica shards."""
        return self.shard_group is not None and self.shard_group.group_size != 1


@dataclass(frozen=True)
class Handles:
    """Where a serialised graph's inputs are loaded from (`load`) and its tensors stored to (host streams or
    remote buffers), and the input that takes the step's random seed, if any."""

    load: MutableMapping[popxl.Tensor, Any]
    store_streams: MutableMapping[popxl.Tensor, popxl.DeviceToHostStream]
    store_buffers: MutableMapping[popxl.Tensor, Any]
    seed_input: popxl.Tensor | None = None


def _is_handle_tuple(value: Any) -> bool:
    return (
        isinstance(value, tuple | list)
        and 2 <= len(value) <= 3
        and isinstance(value[0], popxl.RemoteBuffer)
        and (value[1] is None or isinstance(value[1], int | np.integer))
    )


def normalise(handles: MutableMapping[Any, Any]) -> None:
    """Turn `(buffer, offset[, group])` tuples into RemoteHandles, in place (as popxl-addons does)."""
    for k, v in list(handles.items()):
        if _is_handle_tuple(v):
            offset = None if v[1] is None else int(v[1])
            handles[k] = RemoteHandle(v[0], offset, *v[2:])
