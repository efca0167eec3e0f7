"""In-place updates of a tensor (usually a variable or an accumulator)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def _moving_average(t: jax.Array, x: jax.Array, f: jax.Array) -> jax.Array:
    return t * f + (1 - f) * x


# Each update computes in float32 at least (then rounds to the updated tensor's type), as popart's mixed-precision
# var updates do: a float16 accumulator still sees float32 arithmetic.
UPDATES: dict[str, Callable[..., jax.Array]] = {
    "accumulate": lambda t, x, f: t + f * x,
    "accumulate_square": lambda t, x, f: t + f * x * x,
    "accumulate_mean": lambda t, x, step: t * (step / (step + 1)) + x / (step + 1),
    "accumulate_moving_average": _moving_average,
    "accumulate_moving_average_square": lambda t, x, f: _moving_average(t, x * x, f),
    "accumulator_scale": lambda t, f: t * f,
    "scaled_add": lambda t, x, a, b: t * a + x * b,
    "copy": lambda t, x: jnp.broadcast_to(x, t.shape),
}


def _compute_type(t: jax.Array) -> jnp.dtype:
    return jnp.promote_types(t.dtype, jnp.float32) if jnp.issubdtype(t.dtype, jnp.floating) else t.dtype


def _lower(ctx: LoweringContext, attrs: Attrs, t: jax.Array, *rest: jax.Array) -> list[jax.Array]:
    ct = _compute_type(t)
    updated = UPDATES[attrs["kind"]](t.astype(ct), *(jnp.asarray(v).astype(ct) for v in rest))
    return [jnp.broadcast_to(updated, t.shape).astype(t.dtype)]


VAR_UPDATE = register(OpDef("var_update", _infer, _lower, modifies=modifies_first))
