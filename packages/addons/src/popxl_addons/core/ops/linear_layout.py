"""popxl-addons' `LinearLayout` custom op: an IPU tile-layout hint, the identity on values here.

On an IPU the op copies its input into a new tensor of the same type and shape that poputil
maps linearly over the tiles, each tile holding a whole multiple of `bs` elements (its grain
size). XLA lays out tensors itself, so here the op is the identity: its output equals its
input, for a tensor of any shape and type, as popart's op allows. `bs` is checked (a positive
integer, as a grain size must be) and recorded on the op, with no other effect. popxl-addons
gives the op no gradient; this op kind's gradient is the identity's, so the hint may also sit
in a graph that is differentiated.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import popxl
from popxl.extension import Attrs, GradBuilder, LoweringContext, Op, OpDef, create_op, register

__all__ = ["linear_layout"]


def _normalise(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> dict[str, Any]:
    bs = attrs["bs"]
    if isinstance(bs, bool) or not isinstance(bs, numbers.Integral) or int(bs) < 1:
        raise ValueError(f"linear_layout: the grain size `bs` must be a positive integer, got {bs!r}")
    return {"bs": int(bs)}


def _infer(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> list[popxl.TensorSpec]:
    return [specs[0]]


def _lower(ctx: LoweringContext, attrs: Attrs, t: Any) -> list[Any]:
    return [t]


def _grad(gb: GradBuilder, op: Op, out_grads: Sequence[popxl.Tensor | None]) -> list[popxl.Tensor | None]:
    return [out_grads[0]]


LINEAR_LAYOUT = register(
    OpDef(
        "linear_layout",
        _infer,
        _lower,
        grad=_grad,
        normalise=_normalise,
        output_names=("linear_layout",),
        departure="popxl-addons' custom op (no popxl op): the identity here; gradient: identity (popxl-addons: none)",
    )
)


def linear_layout(t: popxl.Tensor, bs: int = 1) -> popxl.Tensor:
    """`t` unchanged: on an IPU, a copy mapped linearly over the tiles in whole multiples of `bs` elements."""
    return create_op(LINEAR_LAYOUT, [t], {"bs": bs})[0]
