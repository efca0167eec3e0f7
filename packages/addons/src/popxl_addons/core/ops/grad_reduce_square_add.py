"""popxl-addons' `GradReduceSquareAdd` custom op: the sum of squares of a loss-scaled gradient, unscaled.

For a gradient `t` that carries a loss scaling `s`, the op gives
`sum(t ** 2) / s ** 2`: the squared L2 norm of the unscaled gradient, which global
gradient-norm clipping adds up over all gradients before taking the square root. As in
popxl-addons, the wrapper turns `s` into the factor `1 / (s * s)` (a float32 constant for
a number) and the op multiplies the reduced squares by it. The squares and their sum are
float32 whatever `t`'s type (popops' reduction to a FLOAT result), and so is the scalar
result. popart gives the op no gradient, and neither does this op kind.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp

import popxl
from popxl import ops
from popxl.extension import Attrs, LoweringContext, OpDef, create_op, register

__all__ = ["grad_reduce_square_add"]


def _infer(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> list[popxl.TensorSpec]:
    t, scale = specs
    if not t.dtype.is_floating_point or not scale.dtype.is_floating_point:
        raise ValueError(f"grad_reduce_square_add needs floating point inputs, got {t.dtype} and {scale.dtype}")
    if math.prod(scale.shape) != 1:
        raise ValueError(f"grad_reduce_square_add's scale must be a scalar, got shape {scale.shape}")
    return [popxl.TensorSpec((), popxl.float32)]


def _lower(ctx: LoweringContext, attrs: Attrs, t: Any, scale: Any) -> list[Any]:
    squares = jnp.square(t.astype(jnp.float32))
    return [jnp.sum(squares) * scale.astype(jnp.float32).reshape(())]


GRAD_REDUCE_SQUARE_ADD = register(OpDef("grad_reduce_square_add", _infer, _lower, output_names=("grad_reduced",)))


def grad_reduce_square_add(t: popxl.Tensor, loss_scaling: float | popxl.Tensor) -> popxl.Tensor:
    """`sum(t ** 2) / loss_scaling ** 2` in float32: the squared norm of a gradient `t` scaled by `loss_scaling`.

    `ops.sqrt(grad_reduce_square_add(grad, loss_scaling=64))` is the norm of `grad / 64`. A tensor
    `loss_scaling` is cast to float32 before it is squared, so a float16 scaling above 256 does not
    overflow.
    """
    if isinstance(loss_scaling, popxl.Tensor):
        ls = ops.cast(loss_scaling, popxl.float32) if loss_scaling.dtype != popxl.float32 else loss_scaling
        scale = 1 / (ls * ls)
    else:
        scale = popxl.constant(1 / (loss_scaling * loss_scaling), popxl.float32)
    return create_op(GRAD_REDUCE_SQUARE_ADD, [t, scale], {})[0]
