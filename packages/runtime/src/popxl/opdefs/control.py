"""Subgraph calls and loops.

Both read and write what their subgraph's ops declare. A call updates the
caller's tensor for the inputs in its `modified` attr (the graph's by-reference
inputs when it was created, plus any marked by
`CallSiteInfo.set_parent_input_modified`); a loop for its graph's by-reference
inputs. Their gradient rules are built on autodiff and registered by
`popxl.transforms`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax

from popxl.graph import Graph
from popxl.op import Attrs, OpDef, Resource, Subgraph, graph_reads, graph_writes, register
from popxl.tensor import TensorSpec

if TYPE_CHECKING:
    from popxl.lowering.interpreter import LoweringContext


def by_ref_indices(graph: Graph) -> tuple[int, ...]:
    """Indices of `graph`'s inputs that are passed by reference."""
    return tuple(i for i, t in enumerate(graph.inputs) if graph.is_by_ref(t))


def _reads(attrs: Attrs) -> frozenset[Resource]:
    return graph_reads(attrs["graph"])


def _writes(attrs: Attrs) -> frozenset[Resource]:
    return graph_writes(attrs["graph"])


def _call_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    return [t.spec for t in attrs["graph"].outputs]


def _lower_call(ctx: LoweringContext, attrs: Attrs, *vals: jax.Array) -> list[jax.Array]:
    outs, finals = ctx.run_graph(attrs["graph"], list(vals))
    return [*outs, *(finals[i] for i in sorted(attrs["modified"]))]


CALL = register(
    OpDef(
        "call",
        _call_infer,
        _lower_call,
        reads=_reads,
        writes=_writes,
        subgraphs=lambda attrs: (Subgraph(attrs["graph"], 1),),
        modifies=lambda attrs: dict.fromkeys(attrs["modified"]),
        outputs_follow_graph=True,
    )
)


def _repeat_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    g = attrs["graph"]
    if attrs["count"] < 0:
        raise ValueError(f"repeat_count must be >= 0, got {attrs['count']}")
    if len(g.inputs) < len(g.outputs):
        raise ValueError(
            f"Graph {g.id!r} has {len(g.outputs)} outputs but only {len(g.inputs)} inputs: "
            "repeat carries output i into input i"
        )
    for i, (o, t) in enumerate(zip(g.outputs, g.inputs)):
        if (o.shape, o.dtype) != (t.shape, t.dtype):
            raise ValueError(
                f"repeat of {g.id!r}: output {i} ({o.dtype.name} {o.shape}) must match the input it is "
                f"carried into ({t.id}: {t.dtype.name} {t.shape})"
            )
    return dict(attrs)


def _lower_repeat(ctx: LoweringContext, attrs: Attrs, *vals: jax.Array) -> list[jax.Array]:
    g: Graph = attrs["graph"]
    carried = len(g.outputs)
    modified = by_ref_indices(g)
    # By-reference inputs past the carried ones keep their values from one iteration to the next too.
    refs = [i for i in modified if i >= carried]
    moving = ctx.writes(g)

    def body(_: Any, carry: Any) -> Any:
        loop_vals, ref_vals, world_vals = carry
        inputs = list(vals)
        inputs[:carried] = loop_vals
        for i, v in zip(refs, ref_vals):
            inputs[i] = v
        outer = ctx.world
        ctx.world = outer.copy()
        ctx.world.replace(moving, world_vals)
        outs, finals = ctx.run_graph(g, inputs)
        world_vals = ctx.world.values(moving)
        ctx.world = outer
        return list(outs), [finals[i] for i in refs], world_vals

    init = (list(vals[:carried]), [vals[i] for i in refs], ctx.world.values(moving))
    outs, ref_vals, world_vals = jax.lax.fori_loop(0, attrs["count"], body, init)
    ctx.world.replace(moving, world_vals)
    final = dict(zip(refs, ref_vals))
    return [*outs, *(outs[i] if i < carried else final[i] for i in modified)]


REPEAT = register(
    OpDef(
        "repeat",
        lambda specs, attrs: [t.spec for t in attrs["graph"].outputs],
        _lower_repeat,
        normalise=_repeat_normalise,
        reads=_reads,
        writes=_writes,
        subgraphs=lambda attrs: (Subgraph(attrs["graph"], attrs["count"]),),
        modifies=lambda attrs: dict.fromkeys(by_ref_indices(attrs["graph"])),
    )
)
