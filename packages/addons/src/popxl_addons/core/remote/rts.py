"""Replicated tensor sharding: gathering shards into whole tensors and reducing gradients back into shards."""

from __future__ import annotations

import math

import popxl
from popxl import ops
from popxl_addons.core.modules.graph import GraphWithNamedArgs, graph_per_tensor
from popxl_addons.core.modules.named_replica_grouping import NamedReplicaGrouping
from popxl_addons.core.modules.named_tensors import NamedTensors

__all__ = [
    "all_gather_replica_sharded_graph",
    "reduce_replica_sharded_graph",
    "reduce_replica_sharded_tensor",
    "gather_replica_sharded_tensor",
    "replica_sharded_spec",
    "gather_replica_sharded",
]


def replica_sharded_spec(t: popxl.Tensor, shard_over: popxl.ReplicaGrouping) -> popxl.TensorSpec:
    """The spec of one replica's 1-D shard of `t` over `shard_over` (`t`'s own spec if it cannot be sharded)."""
    g = shard_over.group_size
    if t.meta_shape or g == 1 or t.nelms % g:
        return t.spec
    return popxl.TensorSpec((t.nelms // g,), t.dtype, t.shape)


def gather_replica_sharded(t: popxl.Tensor, group: popxl.ReplicaGrouping) -> popxl.Tensor:
    """The whole tensor from the shards of `t` held by the members of `group` (its meta shape, or 1-D)."""
    gathered = ops.collectives.replicated_all_gather(t, group=group, output_shape="new_axis")
    flat = ops.reshape(gathered, (-1,))
    if not t.meta_shape:
        return flat
    n = math.prod(t.meta_shape)
    if flat.shape[0] != n:
        flat = ops.slice(flat, 0, n, axis=0)
    return ops.reshape(flat, t.meta_shape)


def gather_replica_sharded_tensor(
    t: popxl.Tensor, use_io_tiles: bool = False, replica_group: popxl.ReplicaGrouping | None = None
) -> popxl.Tensor:
    """`t` gathered over `replica_group` (all replicas by default) if it is a shard; copied from the IO tiles
    with `use_io_tiles`."""
    group = replica_group if replica_group is not None else popxl.gir().replica_grouping()
    if t.meta_shape:
        if use_io_tiles:
            with popxl.io_tiles():
                t = gather_replica_sharded(t, group)
        else:
            t = gather_replica_sharded(t, group)
    return ops.io_tile_copy(t) if use_io_tiles else t


def all_gather_replica_sharded_graph(
    tensors: NamedTensors, use_io_tiles: bool = False, replica_groups: NamedReplicaGrouping | None = None
) -> tuple[GraphWithNamedArgs, list[str]]:
    """A graph whose named inputs have the specs of `tensors` and whose outputs are them gathered, and their names.

    Each is gathered over its grouping in `replica_groups` (all replicas by default).
    Use as `NamedTensors.pack(names, graph.bind(shards).call())`.
    """
    ir = popxl.gir()
    groups = replica_groups.to_dict() if replica_groups is not None else {}

    def gather(name: str, shard: popxl.Tensor) -> popxl.Tensor:
        return gather_replica_sharded_tensor(shard, use_io_tiles, groups.get(name, ir.replica_grouping()))

    return graph_per_tensor("all_gather", tensors, gather)


def reduce_replica_sharded_tensor(
    t: popxl.Tensor,
    op: str = "add",
    replica_group: popxl.ReplicaGrouping | None = None,
    shard_group: popxl.ReplicaGrouping | None = None,
) -> popxl.Tensor:
    """`t` reduced with `op` over `replica_group` (all replicas by default) and left as this replica's shard
    over `shard_group` (the replica group by default) when it divides evenly; otherwise reduced whole."""
    group = replica_group if replica_group is not None else popxl.gir().replica_grouping()
    shards = shard_group if shard_group is not None else group
    if shards.group_size > 1 and t.nelms % shards.group_size == 0:
        if shards == group:
            return ops.collectives.replicated_reduce_scatter(
                t, op, group, configure_output_for_replicated_tensor_sharding=True
            )
        if group.group_size > 1:
            t = ops.collectives.replicated_all_reduce(t, op, group)
        return ops.collectives.replica_sharded_slice(t, shards)
    return ops.collectives.replicated_all_reduce(t, op, group)


def reduce_replica_sharded_graph(
    tensors: NamedTensors,
    op: str = "add",
    use_io_tiles: bool = False,
    shard_groups: NamedReplicaGrouping | None = None,
    replica_group: popxl.ReplicaGrouping | None = None,
) -> tuple[GraphWithNamedArgs, list[str]]:
    """A graph whose named inputs have the specs of `tensors` and whose outputs are them reduced into shards,
    and their names (see `reduce_replica_sharded_tensor`; each tensor sharded over its `shard_groups` entry)."""
    groups = shard_groups.to_dict() if shard_groups is not None else {}

    def reduce(name: str, value: popxl.Tensor) -> popxl.Tensor:
        if use_io_tiles:
            value = ops.io_tile_copy(value)
        return reduce_replica_sharded_tensor(value, op, replica_group, groups.get(name, replica_group))

    return graph_per_tensor("replica_reduce", tensors, reduce, popxl.io_tiles() if use_io_tiles else None)
