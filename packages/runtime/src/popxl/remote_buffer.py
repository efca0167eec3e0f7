"""Remote buffers: off-chip arrays of `entries` tensors, one array per replica."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from popxl import context, dtypes
from popxl.replica_grouping import ReplicaGrouping

if TYPE_CHECKING:
    from popxl.ir import Ir

# Where a remote buffer's storage may live: pinned host memory, or the device's own memory.
MEMORY_KINDS = ("host", "device")

# The most bytes a remote buffer may hold (1 PiB): more is a mistake in its shape or entries, refused when the
# buffer is made rather than when a Session tries to allocate it.
MAX_BUFFER_BYTES = 2**50


def _whole(value: Any, what: str) -> int:
    """`value` as an int, refusing what is not a whole number (2.5, "3", True)."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a whole number, got {value!r}")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and float(value).is_integer():
        return int(float(value))
    raise ValueError(f"{what} must be a whole number, got {value!r}")


def _checked_shape(shape: Any) -> tuple[int, ...]:
    """A remote buffer's entry shape, each dimension a whole number of zero or more."""
    try:
        dims = tuple(shape)
    except TypeError:
        raise ValueError(f"A remote buffer's tensor shape must be a sequence of sizes, got {shape!r}") from None
    checked = tuple(_whole(d, f"Dimension {i} of a remote buffer's tensor shape {dims}") for i, d in enumerate(dims))
    if any(d < 0 for d in checked):
        raise ValueError(f"A remote buffer's tensor shape cannot have negative dimensions, got {checked}")
    return checked


class RemoteBuffer:
    """Storage for `entries` tensors of one shape and dtype on every replica.

    `entries` may grow after ops using the buffer exist; storage is sized by its
    final value when a Session is created. `memory` places this buffer's storage
    ("host" or "device"), whatever the Session's `remote_memory`; None (the
    default) follows the Session. popxl has no such choice (an IPU's remote
    buffers are always in host memory); it lets a program keep some buffers on
    the device and others off it.
    """

    def __init__(
        self,
        tensor_shape: Any,
        tensor_dtype: Any,
        entries: int = 1,
        ir: Ir | None = None,
        *,
        memory: str | None = None,
    ) -> None:
        self._ir = ir if ir is not None else context.gir()
        self._tensor_shape = _checked_shape(tensor_shape)
        self._tensor_dtype = dtypes.as_dtype(tensor_dtype)
        self.meta_shape: tuple[int, ...] = ()
        # Replicas each value is sharded over (None: the sharded variable's whole group).
        self.shard_over: int | None = None
        # How error messages name entry i; transforms that lay entries out (rows of steps) set it.
        self.name_entry: Callable[[int], str] | None = None
        self.remote_buffer_id = self._ir.next_buffer_id()
        self._entries = 1
        self.entries = entries
        self._memory: str | None = None
        self.memory = memory

    @property
    def memory(self) -> str | None:
        """Where the buffer's storage lives: "host", "device", or None for the Session's `remote_memory`."""
        return self._memory

    @memory.setter
    def memory(self, value: str | None) -> None:
        if value not in (None, *MEMORY_KINDS):
            raise ValueError(f"A remote buffer's memory must be None, 'host' or 'device', got {value!r}")
        self._memory = value

    @property
    def tensor_shape(self) -> tuple[int, ...]:
        """The shape of each entry, fixed when the buffer is made (as in popxl; `set_remote_buffer_info`)."""
        return self._tensor_shape

    @property
    def tensor_dtype(self) -> dtypes.dtype:
        """The dtype of each entry, fixed when the buffer is made (as in popxl; `set_remote_buffer_info`)."""
        return self._tensor_dtype

    @property
    def entries(self) -> int:
        """Number of tensors the buffer holds."""
        return self._entries

    @entries.setter
    def entries(self, value: int) -> None:
        entries = _whole(value, "A remote buffer's entries")
        if entries < 1:
            raise ValueError(f"Entries must be a non-zero, positive integer. Got {value} for a remote buffer")
        self._check_size(self._tensor_shape, self._tensor_dtype, entries)
        self._entries = entries

    def _check_size(self, shape: tuple[int, ...], dtype: dtypes.dtype, entries: int) -> None:
        nbytes = entries * math.prod(shape) * dtype.as_numpy().itemsize
        if nbytes > MAX_BUFFER_BYTES:
            raise ValueError(
                f"A remote buffer of {entries} entries of {dtype.name} {shape} would hold {nbytes} bytes, more than "
                f"the {MAX_BUFFER_BYTES} (1 PiB) this runtime allows: check its shape and entries"
            )

    def set_remote_buffer_info(self, tensor_dtype: Any, tensor_shape: Any, entries: int) -> None:
        """Replace the buffer's tensor dtype, shape and number of entries."""
        shape, dtype = _checked_shape(tensor_shape), dtypes.as_dtype(tensor_dtype)
        count = _whole(entries, "A remote buffer's entries")
        if count < 1:
            raise ValueError(f"Entries must be a non-zero, positive integer. Got {entries} for a remote buffer")
        self._check_size(shape, dtype, count)
        self._entries, self._tensor_shape, self._tensor_dtype = count, shape, dtype

    def validate_tensor_matches_buffer(self, t: Any, num_shards: int = 1) -> None:
        """Raise ValueError unless `t` has the buffer's shape (its meta shape when sharded) and dtype."""
        shape = self.tensor_shape if num_shards == 1 else self.meta_shape
        if tuple(t.shape) != shape or t.dtype is not self.tensor_dtype:
            raise ValueError(
                f"Tensor {t.id} does not match buffer.\nExisting remote buffer has shape={shape} and "
                f"dtype={self.tensor_dtype}.\nThe tensor has shape={tuple(t.shape)}, dtype={t.dtype}."
            )

    @property
    def ir(self) -> Ir:
        """The Ir that owns the buffer."""
        return self._ir

    def __hash__(self) -> int:
        return hash((id(self._ir), self.remote_buffer_id))

    def __repr__(self) -> str:
        meta = f", meta_shape={self.meta_shape}" if self.meta_shape else ""
        return (
            f"RemoteBuffer(id={self.remote_buffer_id}, shape={self.tensor_shape}, "
            f"dtype={self.tensor_dtype.name}, entries={self.entries}{meta})"
        )


def remote_buffer(tensor_shape: Any, tensor_dtype: Any, entries: int = 1, *, memory: str | None = None) -> RemoteBuffer:
    """A remote buffer of the current Ir (`memory`: see `RemoteBuffer`)."""
    return RemoteBuffer(tensor_shape, tensor_dtype, entries, memory=memory)


def replica_sharded_buffer(
    shape: Any,
    dtype: Any,
    replica_grouping: ReplicaGrouping | None = None,
    shard_over: int | None = None,
    entries: int = 1,
) -> RemoteBuffer:
    """A buffer holding one 1-D shard of a tensor of `shape` on each replica of a group.

    As in popxl, the value of each group is sharded over `shard_over` of its
    members at a time (all of them by default): members 0 to `shard_over - 1`
    hold one copy of the shards, the next `shard_over` members another.
    """
    ir = context.gir()
    grouping = replica_grouping if replica_grouping is not None else ir.replica_grouping()
    shape = tuple(shape)
    if grouping.num_groups > 1:
        shape = shape[1:]
    shard_over = grouping.group_size if shard_over is None else shard_over
    if shard_over > grouping.group_size or grouping.group_size % shard_over:
        raise ValueError(f"shard_over={shard_over} must divide the group size {grouping.group_size} of {grouping}")
    nelms = math.prod(shape)
    buf = RemoteBuffer((-(-nelms // shard_over),), dtype, entries, ir)
    buf.meta_shape = shape
    buf.shard_over = shard_over
    return buf
