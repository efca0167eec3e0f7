"""popxl-addons' strided collectives: collectives over any `ReplicaGrouping` (stride and group size).

popxl-addons needed custom ops for these because popart's collectives of its
time took only contiguous groups; here every collective takes any grouping, so
each is the corresponding popxl collective with popxl-addons' output shapes:

- `replicated_all_gather_strided` returns the members' values flattened and
  concatenated in rank order (`[group_size * nelms]`), reshaped to the meta
  shape when the input is a replica-sharded tensor;
- `replicated_reduce_scatter_strided` is popxl's reduce-scatter (`add` or
  `mean`, a 1-D shard of `ceil(nelms / group_size)` elements);
- `replicated_all_reduce_strided` and its `identical_inputs` and
  `identical_grad_inputs` forms are the tensor-parallel all-reduce with `add`
  or `mean`; as in popxl-addons, the gradient swaps the two flags.

Outputs are named as popxl-addons names them: `replicated_all_gather_strided_out`
(then `..._reshaped` when reshaped to the meta shape),
`replicated_reduce_scatter_strided_out` and `replicated_all_reduce_strided_out`.
"""

from __future__ import annotations

import math

import popxl
from popxl import ops
from popxl.extension import REGISTRY, create_op
from popxl_addons.collectives.all_reduce_tp import create_all_reduce
from popxl_addons.core import GraphWithNamedArgs, NamedTensors
from popxl_addons.core.modules.graph import graph_per_tensor

__all__ = [
    "replicated_all_gather_strided",
    "replicated_all_reduce_strided",
    "replicated_all_reduce_strided_identical_inputs",
    "replicated_all_reduce_strided_identical_grad_inputs",
    "replicated_all_reduce_strided_graph",
    "replicated_reduce_scatter_strided",
]

STRIDED_OPS = ("add", "mean")
_KIND = "replicated_all_reduce_strided"


def _group(group: popxl.ReplicaGrouping | None) -> popxl.ReplicaGrouping:
    return group if group is not None else popxl.gir().replica_grouping()


def _reduce_op(op: str, kind: str) -> str:
    if op not in STRIDED_OPS:
        raise ValueError(f"{kind} supports only op in {STRIDED_OPS}, got {op!r}")
    return op


def replicated_all_gather_strided(t: popxl.Tensor, group: popxl.ReplicaGrouping | None = None) -> popxl.Tensor:
    """The values of `t` on the members of `group` (all replicas by default), flattened and concatenated;
    reshaped to the meta shape (its padding dropped) when `t` is a replica-sharded tensor."""
    g = _group(group)
    n = math.prod(t.meta_shape) if t.meta_shape else g.group_size * math.prod(t.shape)
    attrs = {"group": g, "shape": (n,)}
    out = create_op(REGISTRY["replicated_all_gather"], [t], attrs, names=["replicated_all_gather_strided_out"])[0]
    if t.meta_shape:
        # popxl-addons reshapes in place: `out.reshape_(t.meta_shape)`.
        out = ops.reshape_(out, t.meta_shape)
    return out


def replicated_reduce_scatter_strided(
    t: popxl.Tensor,
    op: str = "add",
    group: popxl.ReplicaGrouping | None = None,
    configure_output_for_replicated_tensor_sharding: bool = False,
) -> popxl.Tensor:
    """This replica's 1-D shard of `t` reduced with `op` ('add' or 'mean') over `group`."""
    attrs = {
        "op": _reduce_op(op, "replicated_reduce_scatter_strided"),
        "group": _group(group),
        "rts": configure_output_for_replicated_tensor_sharding,
    }
    kind = REGISTRY["replicated_reduce_scatter"]
    return create_op(kind, [t], attrs, names=["replicated_reduce_scatter_strided_out"])[0]


def replicated_all_reduce_strided(
    t: popxl.Tensor, op: str = "add", group: popxl.ReplicaGrouping | None = None
) -> popxl.Tensor:
    """`t` reduced with `op` ('add' or 'mean') over `group`, forward and gradient."""
    return create_all_reduce(t, op, group, False, False, _KIND, STRIDED_OPS)


def replicated_all_reduce_strided_identical_inputs(
    t: popxl.Tensor, op: str = "add", group: popxl.ReplicaGrouping | None = None
) -> popxl.Tensor:
    """Forward: identity (inputs equal across `group`); gradient: reduced with `op` over `group`."""
    return create_all_reduce(t, op, group, True, False, _KIND, STRIDED_OPS)


def replicated_all_reduce_strided_identical_grad_inputs(
    t: popxl.Tensor, op: str = "add", group: popxl.ReplicaGrouping | None = None
) -> popxl.Tensor:
    """Forward: reduced with `op` over `group`; gradient: identity (gradients equal across `group`)."""
    return create_all_reduce(t, op, group, False, True, _KIND, STRIDED_OPS)


def replicated_all_reduce_strided_graph(
    tensors: NamedTensors,
    op: str = "add",
    group: popxl.ReplicaGrouping | None = None,
    use_io_tiles: bool = False,
) -> tuple[GraphWithNamedArgs, list[str]]:
    """A graph with a named input per tensor of `tensors` whose outputs are them all-reduced over `group`,
    and the outputs' names: use as `NamedTensors.pack(names, graph.bind(ts).call())`."""
    _reduce_op(op, _KIND)

    def reduce(name: str, x: popxl.Tensor) -> popxl.Tensor:
        return replicated_all_reduce_strided(ops.io_tile_copy(x) if use_io_tiles else x, op, group)

    return graph_per_tensor("replica_reduce", tensors, reduce)
