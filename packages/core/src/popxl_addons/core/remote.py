"""Remote buffers for tensors, optionally sharded across a replica group."""

from __future__ import annotations

import math

import popxl
from popxl import ops


def create_remote_buffer(
    spec: popxl.TensorSpec | popxl.Tensor,
    entries: int = 1,
    replica_group: popxl.ReplicaGrouping | None = None,
    shard_over: int | None = None,
) -> popxl.RemoteBuffer:
    """A remote buffer for tensors of `spec`, holding 1-D shards when `shard_over` > 1."""
    spec = spec.spec if isinstance(spec, popxl.Tensor) else spec
    group = replica_group if replica_group is not None else popxl.gir().replica_grouping()
    shard_over = group.group_size if shard_over is None else shard_over
    if spec.meta_shape:
        buffer = popxl.remote_buffer(spec.shape, spec.dtype, entries)
        buffer.meta_shape = spec.meta_shape
        return buffer
    if shard_over > 1:
        nelms = math.prod(spec.shape)
        if nelms % shard_over:
            raise ValueError(f"Can't shard tensor with {nelms} elements over {shard_over} replicas")
        shape = (group.num_groups, *spec.shape) if group.num_groups > 1 else spec.shape
        return popxl.replica_sharded_buffer(shape, spec.dtype, group, shard_over, entries)
    return popxl.remote_buffer(spec.shape, spec.dtype, entries)


def replica_sharded_spec(t: popxl.Tensor, shard_over_group: popxl.ReplicaGrouping) -> popxl.TensorSpec:
    """The spec of one replica's shard of `t` over `shard_over_group` (unchanged if unshardable)."""
    g = shard_over_group.group_size
    if t.meta_shape or g == 1 or t.nelms % g:
        return t.spec
    return popxl.TensorSpec((t.nelms // g,), t.dtype, t.shape)


def gather_replica_sharded(t: popxl.Tensor, group: popxl.ReplicaGrouping) -> popxl.Tensor:
    """The full tensor from the shards `t` held by the members of `group`."""
    gathered = ops.collectives.replicated_all_gather(t, group=group, output_shape="new_axis")
    flat = ops.reshape(gathered, (-1,))
    if t.meta_shape:
        n = math.prod(t.meta_shape)
        if flat.shape[0] != n:
            flat = ops.slice(flat, 0, n, axis=0)
        return ops.reshape(flat, t.meta_shape)
    return flat
