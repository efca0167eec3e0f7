"""In-place updates of a tensor (usually a variable or an accumulator)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from popxl.op import Attrs, OpDef, register
from popxl.opdefs.common import broadcast_shapes, modifies_first
from popxl.tensor import TensorSpec

if TYPE_CHECKING:
    from popxl.lowering.interpreter import LoweringContext


def _infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    t = specs[0]
    for s in specs[1:]:
        try:
            ok = broadcast_shapes(t.shape, s.shape) == t.shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{attrs['kind']}: a {s.shape} update cannot be applied in place to {t.shape}")
    return [t]


def _update(kind: str, t: jax.Array, x: jax.Array, *factors: jax.Array) -> jax.Array:
    x = x.astype(t.dtype)
    f = [jnp.asarray(v).astype(t.dtype) for v in factors]
    if kind == "accumulate":
        return t + f[0] * x
    if kind == "accumulate_square":
        return t + f[0] * x * x
    if kind == "accumulate_mean":
        return t * (f[0] / (f[0] + 1)) + x / (f[0] + 1)
    if kind == "accumulate_moving_average":
        return t * f[0] + (1 - f[0]) * x
    if kind == "scaled_add":
        return t * f[0] + x * f[1]
    return jnp.broadcast_to(x, t.shape)  # copy


def _lower(ctx: LoweringContext, attrs: Attrs, t: jax.Array, *rest: jax.Array) -> list[jax.Array]:
    return [jnp.broadcast_to(_update(attrs["kind"], t, *rest), t.shape).astype(t.dtype)]


VAR_UPDATE = register(OpDef("var_update", _infer, _lower, modifies=modifies_first))
