"""Helpers shared by op definitions: shape rules, in-place declarations and the generic VJP gradient."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from popxl.dtypes import dtype
from popxl.op import REGISTRY, Attrs, GradFn, Op, OpDef, create_op, register
from popxl.tensor import Tensor, TensorSpec

if TYPE_CHECKING:
    from popxl.grad_builder import GradBuilder
    from popxl.lowering.interpreter import LoweringContext


def same_dtype(what: str, specs: Sequence[TensorSpec]) -> dtype:
    """The common dtype of `specs`, or a ValueError naming the op."""
    dts = {s.dtype for s in specs}
    if len(dts) != 1:
        raise ValueError(f"Inputs of {what} must share one dtype, got {[s.dtype.name for s in specs]}")
    return specs[0].dtype


def broadcast(what: str, specs: Sequence[TensorSpec]) -> tuple[int, ...]:
    """The broadcast shape of `specs` (NumPy's rule, on shapes alone), or a ValueError naming the op."""
    try:
        return broadcast_shapes(*(s.shape for s in specs))
    except ValueError as e:
        raise ValueError(f"Input shapes of {what} do not broadcast: {[s.shape for s in specs]}") from e


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcast of `shapes`, or a ValueError."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for k, d in enumerate(s, rank - len(s)):
            if d != 1 and out[k] not in (1, d):
                raise ValueError(f"Shapes {list(shapes)} do not broadcast")
            if d != 1:
                out[k] = d
    return tuple(out)


def axis_in(what: str, axis: int, rank: int) -> int:
    """`axis` of a rank-`rank` tensor made non-negative, or a ValueError naming the op."""
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"Axis {axis} of {what} is out of range for a tensor of rank {rank}")
    return axis % max(rank, 1)


def modifies_first(attrs: Attrs) -> dict[int, int | None]:
    """The in-place declaration of an op whose first output is its first input updated."""
    return {0: 0}


def like_input(index: int = 0) -> Callable[[Sequence[TensorSpec], Attrs], list[TensorSpec]]:
    """Shape inference: one output with the spec of input `index`."""

    def infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
        return [specs[index]]

    return infer


def zeros_of(spec: TensorSpec) -> jax.Array:
    """A zero value of `spec`."""
    return jnp.zeros(spec.shape, spec.dtype.as_numpy())


def _lower_vjp(ctx: LoweringContext, attrs: Attrs, *vals: jax.Array) -> list[jax.Array]:
    fwd: OpDef = REGISTRY[attrs["fwd"]]
    fwd_attrs: Attrs = attrs["fwd_attrs"]
    specs: list[TensorSpec] = attrs["in_specs"]
    given = dict(zip(attrs["needs"], vals))
    primals = [given[i] if i in given else zeros_of(s) for i, s in enumerate(specs)]
    wrt: tuple[int, ...] = attrs["wrt"]
    out_specs: list[TensorSpec] = attrs["out_specs"]
    grads = dict(zip(attrs["grads_of"], vals[len(attrs["needs"]) :]))
    # The forward op checked its indices; its lowering traced again here records no checks.
    quiet = copy.copy(ctx)
    quiet.sites = None

    def f(*diff: jax.Array) -> list[jax.Array]:
        full = list(primals)
        for i, v in zip(wrt, diff):
            full[i] = v
        return list(fwd.lower(quiet, fwd_attrs, *full))

    _, pullback = jax.vjp(f, *(primals[i] for i in wrt))
    cotangents = [grads[k] if k in grads else zeros_of(s) for k, s in enumerate(out_specs)]
    return list(pullback(cotangents))


def _infer_vjp(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    in_specs: list[TensorSpec] = attrs["in_specs"]
    return [in_specs[i] for i in attrs["wrt"]]


# The forward op's kind and a copy of its attrs: a gradient graph never changes with its forward graph.
VJP = register(
    OpDef(
        "vjp",
        _infer_vjp,
        _lower_vjp,
        output_names=("vjp_out",),
        departure="the gradient of a forward op kind through JAX's VJP of its lowering (no popxl op)",
    )
)


def vjp_grad(needs: dict[int, tuple[int, ...]] | None = None, linear: bool = False) -> GradFn:
    """A gradient rule derived from JAX's VJP of the op's lowering.

    `needs[i]` lists the forward inputs whose values the gradient of input i
    depends on (all inputs by default, none for `linear` ops); only those become
    activations of the gradient graph.
    """

    def grad(gb: GradBuilder, op: Op, out_grads: Sequence[Tensor | None]) -> list[Tensor | None]:
        wrt = tuple(i for i, t in enumerate(op.inputs) if gb.wants(t) and t.dtype.is_floating_point)
        if not wrt or all(g is None for g in out_grads):
            return [None] * len(op.inputs)
        if linear:
            needed: set[int] = set()
        elif needs is None:
            needed = set(range(len(op.inputs)))
        else:
            needed = {j for i in wrt for j in needs.get(i, tuple(range(len(op.inputs))))}
        order = tuple(sorted(needed))
        grads_of = tuple(k for k, g in enumerate(out_grads) if g is not None)
        attrs = {
            "fwd": op.opdef.name,
            "fwd_attrs": dict(op.attrs),
            "in_specs": [t.spec for t in op.inputs],
            "out_specs": [t.spec for t in op.outputs],
            "needs": order,
            "wrt": wrt,
            "grads_of": grads_of,
        }
        inputs = [gb.fwd(op.inputs[i]) for i in order] + [g for g in out_grads if g is not None]
        outs = create_op(VJP, inputs, attrs, names=[f"{op.opdef.name}_grad_out"] * len(wrt))
        result: list[Tensor | None] = [None] * len(op.inputs)
        for i, t in zip(wrt, outs):
            result[i] = t
        return result

    return grad
