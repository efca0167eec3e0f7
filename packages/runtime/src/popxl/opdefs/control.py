"""Subgraph calls and loops."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from popxl.op import Attrs, Op, OpDef, register
from popxl.tensor import Tensor, TensorSpec


def by_ref_indices(op: Op) -> list[int]:
    """Indices of the called graph's inputs that are passed by reference."""
    g = op.attrs["graph"]
    return [i for i, t in enumerate(g.inputs) if t in g._by_ref_inputs]


def _call_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    return [t.spec for t in attrs["graph"].outputs]


def _lower_call(ctx: Any, op: Op, *vals: jax.Array) -> Any:
    outs, finals = ctx.run_graph(op.attrs["graph"], list(vals))
    return outs, {i: finals[i] for i in by_ref_indices(op)}


def _call_grad(gb: Any, op: Op, out_grads: Sequence[Tensor | None]) -> Any:
    from popxl.transforms.autodiff import call_grad

    return call_grad(gb, op, out_grads)


CALL = register(OpDef("call", _call_infer, _lower_call, grad=_call_grad, side_effects=True))


def _repeat_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
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
    return [t.spec for t in g.outputs]


def _lower_repeat(ctx: Any, op: Op, *vals: jax.Array) -> Any:
    g = op.attrs["graph"]
    carried = len(g.outputs)
    refs = [i for i in by_ref_indices(op) if i >= carried]
    moving = ctx.written_world(g, list(vals))

    def body(_: Any, carry: Any) -> Any:
        loop_vals, ref_vals, world_vals = carry
        inputs = list(vals)
        inputs[:carried] = loop_vals
        for i, v in zip(refs, ref_vals):
            inputs[i] = v
        outer = ctx.world
        ctx.world = {part: dict(entries) for part, entries in outer.items()}
        ctx.set_world_entries(moving, world_vals)
        outs, finals = ctx.run_graph(g, inputs)
        world_vals = ctx.world_entries(moving)
        ctx.world = outer
        return list(outs), [finals[i] for i in refs], world_vals

    init = (list(vals[:carried]), [vals[i] for i in refs], ctx.world_entries(moving))
    outs, ref_vals, world_vals = jax.lax.fori_loop(0, op.attrs["count"], body, init)
    ctx.set_world_entries(moving, world_vals)
    updates = dict(zip(refs, ref_vals))
    for i in by_ref_indices(op):
        if i < carried:
            updates[i] = outs[i]
    return outs, updates


def _repeat_grad(gb: Any, op: Op, out_grads: Sequence[Tensor | None]) -> Any:
    from popxl.transforms.loop_grad import repeat_grad

    return repeat_grad(gb, op, out_grads)


REPEAT = register(OpDef("repeat", _repeat_infer, _lower_repeat, grad=_repeat_grad, side_effects=True))
