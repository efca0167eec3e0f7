"""Collectives of `popxl.ops.collectives`."""

from __future__ import annotations

from popxl import context
from popxl.op import create_op
from popxl.opdefs import collectives as c
from popxl.replica_grouping import ReplicaGrouping
from popxl.tensor import Tensor


def _group(group: ReplicaGrouping | None) -> ReplicaGrouping:
    return group if group is not None else context.gir().replica_grouping()


def _op(op: str) -> str:
    if op not in c.REDUCE_OPS:
        raise ValueError(f"Unknown collective op {op!r}: expected one of {c.REDUCE_OPS}")
    return op


def replicated_all_reduce(t: Tensor, op: str = "add", group: ReplicaGrouping | None = None) -> Tensor:
    """`t` reduced with `op` over the replicas of `group`, on every member."""
    return create_op(c.ALL_REDUCE, [t], {"op": _op(op), "group": _group(group)})[0]


def replicated_all_reduce_(t: Tensor, op: str = "add", group: ReplicaGrouping | None = None) -> Tensor:
    """In-place form of `replicated_all_reduce`."""
    return create_op(c.ALL_REDUCE_INPLACE, [t], {"op": _op(op), "group": _group(group)})[0]


def replicated_reduce_scatter(
    t: Tensor,
    op: str = "add",
    group: ReplicaGrouping | None = None,
    configure_output_for_replicated_tensor_sharding: bool = False,
) -> Tensor:
    """Shard `rank` of `t` (flattened, padded) reduced over `group`."""
    attrs = {"op": _op(op), "group": _group(group), "rts": configure_output_for_replicated_tensor_sharding}
    return create_op(c.REDUCE_SCATTER, [t], attrs)[0]


def replica_sharded_slice(t: Tensor, group: ReplicaGrouping | None = None) -> Tensor:
    """Each replica's own shard (flattened, padded) of its own `t`."""
    return create_op(c.SHARDED_SLICE, [t], {"group": _group(group), "rts": True})[0]


def replicated_all_gather(
    t: Tensor, axis: int = 0, group: ReplicaGrouping | None = None, output_shape: str = "auto"
) -> Tensor:
    """The members' values of `t` combined in rank order."""
    if not isinstance(axis, int):
        raise ValueError(f"replicated_all_gather axis must be an int, got {axis!r}")
    g = _group(group)
    if output_shape == "auto":
        output_shape = "meta_shape" if t.meta_shape else "concat"
    if output_shape == "new_axis":
        return create_op(c.ALL_GATHER, [t], {"group": g, "shape": None})[0]
    if output_shape == "meta_shape":
        if not t.meta_shape:
            raise ValueError(f"{t} has no meta_shape to gather into")
        return create_op(c.ALL_GATHER, [t], {"group": g, "shape": t.meta_shape})[0]
    if output_shape != "concat":
        raise ValueError(f"output_shape must be 'auto', 'new_axis', 'concat' or 'meta_shape', got {output_shape!r}")
    from popxl.ops.maths import reshape, transpose

    stacked = create_op(c.ALL_GATHER, [t], {"group": g, "shape": None})[0]
    axis = axis % max(t.rank, 1)
    perm = [*range(1, axis + 1), 0, *range(axis + 1, t.rank + 1)]
    moved = transpose(stacked, perm) if axis else stacked
    shape = list(t.shape)
    shape[axis] *= g.group_size
    return reshape(moved, shape)


def replicated_slice(t: Tensor, axis: int = 0, group: ReplicaGrouping | None = None) -> Tensor:
    """Each replica's `rank`-th equal part of `t` along `axis`."""
    from popxl.ops.maths import reshape, transpose

    g = _group(group)
    axis = axis % t.rank
    if t.shape[axis] % g.group_size:
        raise ValueError(f"Axis {axis} of {t} does not split into {g.group_size} equal parts")
    # With `axis` moved to the front, each replica's part is one contiguous flat shard.
    order = [axis, *[i for i in range(t.rank) if i != axis]]
    front = transpose(t, order) if axis else t
    part = [front.shape[0] // g.group_size, *front.shape[1:]]
    shard = reshape(replica_sharded_slice(front, g), part)
    back = [order.index(i) for i in range(t.rank)]
    return transpose(shard, back) if axis else shard
