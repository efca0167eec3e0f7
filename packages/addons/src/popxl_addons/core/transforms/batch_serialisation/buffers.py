"""Remote buffers laid out as rows x steps matrices of micro-batch tensors."""

from __future__ import annotations

from functools import partial

import popxl
from popxl_addons.core.remote.remote import create_remote_buffer


def batch_serial_buffer(
    t: popxl.Tensor | popxl.TensorSpec,
    steps: int = 1,
    rows: int = 1,
    shard_group: popxl.ReplicaGrouping | None = None,
) -> popxl.RemoteBuffer:
    """A buffer of `steps * rows` entries for `t` (entry = row * steps + step), sharded over `shard_group`."""
    shard_over = shard_group.group_size if shard_group is not None else 1
    buffer = create_remote_buffer(t, steps * rows, shard_group, shard_over)
    buffer.name_entry = partial(_row_and_step, steps)
    return buffer


def _row_and_step(steps: int, entry: int) -> str:
    return f"row {entry // steps}, step {entry % steps} of rows of {steps} steps" if entry >= 0 else "a negative entry"
