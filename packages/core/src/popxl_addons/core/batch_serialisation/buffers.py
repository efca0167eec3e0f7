"""Remote buffers laid out as rows x steps matrices of micro-batch tensors."""

from __future__ import annotations

import popxl
from popxl_addons.core.remote import create_remote_buffer


def batch_serial_buffer(
    t: popxl.Tensor | popxl.TensorSpec,
    steps: int = 1,
    rows: int = 1,
    shard_group: popxl.ReplicaGrouping | None = None,
) -> popxl.RemoteBuffer:
    """A buffer of `steps * rows` entries for `t` (entry = row * steps + step), sharded over `shard_group`."""
    shard_over = shard_group.group_size if shard_group is not None else 1
    return create_remote_buffer(t, steps * rows, shard_group, shard_over)
