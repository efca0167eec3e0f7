"""Collectives of `popxl.ops.collectives`."""

from __future__ import annotations

import dataclasses
import enum

from popxl import context
from popxl.ir import Ir
from popxl.op import create_op
from popxl.opdefs import collectives as c
from popxl.ops.maths import reshape, transpose
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
    return create_op(c.REDUCE_SCATTER, [t], {"op": "local", "group": _group(group), "rts": True})[0]


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
    stacked = create_op(c.ALL_GATHER, [t], {"group": g, "shape": None})[0]
    axis = axis % max(t.rank, 1)
    perm = [*range(1, axis + 1), 0, *range(axis + 1, t.rank + 1)]
    moved = transpose(stacked, perm) if axis else stacked
    shape = list(t.shape)
    shape[axis] *= g.group_size
    return reshape(moved, shape)


def replicated_slice(t: Tensor, axis: int = 0, group: ReplicaGrouping | None = None) -> Tensor:
    """Each replica's `rank`-th equal part of `t` along `axis`; an axis of one part per replica is dropped.

    As in popxl, the gradient is the all-gather of every replica's output gradient.
    """
    g = _group(group)
    axis = axis % t.rank
    if t.shape[axis] % g.group_size:
        raise ValueError(
            f"replicated_slice: axis {axis} of {t} (size {t.shape[axis]}) does not split into "
            f"{g.group_size} equal parts, one per replica of {g}"
        )
    # With `axis` moved to the front, each replica's part is one contiguous flat shard.
    order = [axis, *[i for i in range(t.rank) if i != axis]]
    front = transpose(t, order) if axis else t
    part = [front.shape[0] // g.group_size, *front.shape[1:]]
    attrs = {"op": "local", "group": g, "rts": False}
    shard = create_op(c.REDUCE_SCATTER, [front], attrs, names=[f"{t.name.split('/')[-1]}_replicated_slice"])[0]
    shape = part[1:] if part[0] == 1 else part
    # popxl moves the front axis back to `axis`, even when the part's axis was dropped: that
    # permutes the remaining axes for rank > 2. Kept, so that results match popxl's.
    perm = list(range(len(shape)))
    perm.insert(axis, perm.pop(0))
    out = reshape(shard, shape)
    return transpose(out, perm) if axis and len(shape) > 1 else out


class CommGroupType(enum.Enum):
    """popart's kinds of replica group (popxl now describes groups with `ReplicaGrouping`)."""

    All = 0
    Consecutive = 1
    Orthogonal = 2
    Ungrouped = 3


@dataclasses.dataclass(frozen=True)
class CommGroup:
    """popart's description of a replica group: a kind and a group size."""

    type: CommGroupType = CommGroupType.All
    replicaGroupSize: int = 0  # noqa: N815  (popart's name)

    def to_replica_grouping(self, ir: Ir) -> ReplicaGrouping:
        """The same groups as a `ReplicaGrouping` of `ir`."""
        n = ir.replication_factor
        size = self.replicaGroupSize
        if self.type is CommGroupType.All:
            return ir.replica_grouping()
        if self.type is CommGroupType.Ungrouped:
            return ir.replica_grouping(group_size=1)
        if size < 1 or n % size:
            raise ValueError(f"{self} needs a group size dividing the {n} replicas")
        if self.type is CommGroupType.Consecutive:
            return ir.replica_grouping(group_size=size)
        return ir.replica_grouping(stride=n // size, group_size=size)


def _ipu_all_reduce(
    ts: list[Tensor], ipus: list[int] | None, op: str, identical_inputs: bool, identical_grad_inputs: bool
) -> list[Tensor]:
    attrs = {
        "op": op,
        "ipus": tuple(ipus) if ipus is not None else None,
        "identical_inputs": identical_inputs,
        "identical_grad_inputs": identical_grad_inputs,
    }
    return create_op(c.IPU_ALL_REDUCE, list(ts), attrs)


def all_reduce(ts: list[Tensor], ipus: list[int] | None = None, op: str = "add") -> list[Tensor]:
    """`ts`, one per IPU of a replica, each replaced by their reduction with `op` (autodiff: 'add' only)."""
    return _ipu_all_reduce(ts, ipus, op, False, False)


def all_reduce_identical_inputs(ts: list[Tensor], ipus: list[int] | None = None, op: str = "add") -> list[Tensor]:
    """Forward: identity (the inputs are identical); gradient: the all-reduce of the gradients."""
    return _ipu_all_reduce(ts, ipus, op, True, False)


def all_reduce_identical_grad_inputs(ts: list[Tensor], ipus: list[int] | None = None, op: str = "add") -> list[Tensor]:
    """Forward: the all-reduce; gradient: identity (the gradients are identical)."""
    return _ipu_all_reduce(ts, ipus, op, False, True)
