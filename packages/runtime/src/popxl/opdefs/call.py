"""Subgraph calls, loops and conditionals.

Both read and write what their subgraph's ops declare. A call updates the
caller's tensor for the inputs in its `modified` attr (the graph's by-reference
inputs when it was created, plus any marked by
`CallSiteInfo.set_parent_input_modified`); a loop for its graph's by-reference
inputs. Their gradient rules are built on autodiff and registered by
`popxl.transforms`. A conditional runs one of two graphs (`jax.lax.cond`) and
reads and writes what either declares; its gradient is JAX's VJP of it, for
branches that touch no resources.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax

from popxl.graph import Graph
from popxl.op import (
    Aliasing,
    Attrs,
    Effects,
    Op,
    OpDef,
    PopartFacts,
    Resource,
    Subgraph,
    graph_reads,
    graph_writes,
    register,
)
from popxl.opdefs.common import vjp_grad
from popxl.tensor import Tensor, TensorSpec

if TYPE_CHECKING:
    from popxl.grad_builder import GradBuilder
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


def call_modified(attrs: Attrs) -> tuple[int, ...]:
    """The inputs a call updates in its caller: its graph's by-reference inputs and the ones marked modified."""
    return tuple(sorted({*attrs["modified"], *by_ref_indices(attrs["graph"])}))


def _lower_call(ctx: LoweringContext, attrs: Attrs, *vals: jax.Array) -> list[jax.Array]:
    outs, finals = ctx.run_graph(attrs["graph"], list(vals))
    return [*outs, *(finals[i] for i in call_modified(attrs))]


CALL = register(
    OpDef(
        "call",
        _call_infer,
        _lower_call,
        effects=Effects(
            reads=_reads,
            writes=_writes,
            subgraphs=lambda attrs: (Subgraph(attrs["graph"], 1, inputs_follow=True, outputs_follow=True),),
        ),
        aliasing=Aliasing(
            modifies=lambda attrs: dict.fromkeys(call_modified(attrs)),
            note="the called graph's by-reference inputs, and those marked by `set_parent_input_modified`",
        ),
        popart=PopartFacts(op_type="Call"),
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


def _run_in_world(
    ctx: LoweringContext, moving: list[Resource], world_vals: list[Any], graph: Graph, inputs: list[jax.Array]
) -> tuple[tuple[list[jax.Array], list[jax.Array]], list[Any]]:
    """Run `graph` inside a traced JAX function: the `moving` resources start from `world_vals`, and their
    values after the run are returned with the graph's outputs and final inputs, as the function's results."""
    outer = ctx.world
    ctx.world = outer.copy()
    ctx.world.replace(moving, world_vals)
    try:
        result = ctx.run_graph(graph, inputs)
        return result, ctx.world.values(moving)
    finally:
        ctx.world = outer


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
        outer = ctx.looped
        ctx.looped = outer | set(moving)
        try:
            (outs, finals), world_vals = _run_in_world(ctx, moving, world_vals, g, inputs)
        finally:
            ctx.looped = outer
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
        effects=Effects(
            reads=_reads,
            writes=_writes,
            subgraphs=lambda attrs: (Subgraph(attrs["graph"], attrs["count"], inputs_follow=True),),
        ),
        aliasing=Aliasing(
            modifies=lambda attrs: dict.fromkeys(by_ref_indices(attrs["graph"])),
            note="the called graph's by-reference inputs",
        ),
        popart=PopartFacts(op_type="Loop"),
    )
)


def _branches(attrs: Attrs) -> tuple[Graph, Graph]:
    return attrs["then_branch"], attrs["else_branch"]


def _conditional_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    cond = specs[0]
    then_g, else_g = _branches(attrs)
    if cond.dtype.name != "bool" or math.prod(cond.shape) != 1:
        raise ValueError(f"conditional: cond must be a single bool value, got {cond.dtype.name} {cond.shape}")
    if len(then_g.outputs) != len(else_g.outputs):
        raise ValueError(
            "`then_branch` graph and `else_branch` graph must have the same number of outputs: "
            f"{len(then_g.outputs)} != {len(else_g.outputs)}"
        )
    for i, (a, b) in enumerate(zip(then_g.outputs, else_g.outputs)):
        if (a.shape, a.dtype) != (b.shape, b.dtype):
            raise ValueError(
                f"conditional: output {i} is {a.dtype.name} {a.shape} in `then_branch` but "
                f"{b.dtype.name} {b.shape} in `else_branch`"
            )
    for g in (then_g, else_g):
        if by_ref_indices(g):
            raise NotImplementedError(
                f"TensorByRef is not implemented for the conditional op: {g.id!r} has by-reference inputs"
            )
    return dict(attrs)


def _lower_conditional(ctx: LoweringContext, attrs: Attrs, cond: jax.Array, *vals: jax.Array) -> list[jax.Array]:
    then_g, else_g = _branches(attrs)
    n_then = len(then_g.inputs)
    moving = sorted({*ctx.writes(then_g), *ctx.writes(else_g)}, key=repr)

    def branch(graph: Graph, inputs: list[jax.Array]) -> Any:
        def run(world_vals: list[Any]) -> Any:
            (outs, _), new_world = _run_in_world(ctx, moving, world_vals, graph, inputs)
            return list(outs), new_world

        return run

    outs, world_vals = jax.lax.cond(
        cond.reshape(()),
        branch(then_g, list(vals[:n_then])),
        branch(else_g, list(vals[n_then:])),
        ctx.world.values(moving),
    )
    ctx.world.replace(moving, world_vals)
    return list(outs)


def _conditional_grad(gb: GradBuilder, op: Op, out_grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    branches = _branches(op.attrs)
    if any(graph_reads(g) or graph_writes(g) for g in branches):
        raise NotImplementedError(
            f"The gradient of {op} needs branches without remote buffers, host streams or checks: "
            "its forward is replayed to differentiate it"
        )
    return list(vjp_grad()(gb, op, out_grads))


CONDITIONAL = register(
    OpDef(
        "conditional",
        lambda specs, attrs: [t.spec for t in attrs["then_branch"].outputs],
        _lower_conditional,
        grad=_conditional_grad,
        normalise=_conditional_normalise,
        effects=Effects(
            reads=lambda attrs: graph_reads(attrs["then_branch"]) | graph_reads(attrs["else_branch"]),
            writes=lambda attrs: graph_writes(attrs["then_branch"]) | graph_writes(attrs["else_branch"]),
            subgraphs=lambda attrs: (Subgraph(attrs["then_branch"], 1), Subgraph(attrs["else_branch"], 1)),
        ),
    )
)
