"""In-place updates of a tensor (usually a variable or an accumulator), and popart's fused optimizer ops: sparse
accumulation, the Adam/LAMB/AdaMax updater and the Adam/LAMB weight update, with popart's formulas."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

from popxl.op import CHECK_RESULT, Aliasing, Attrs, Effects, OpDef, Resource, register
from popxl.opdefs.common import axis_in, broadcast_shapes, modifies_first
from popxl.opdefs.indexing import check_indices
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


VAR_UPDATE = register(OpDef("var_update", _infer, _lower, aliasing=Aliasing(modifies=modifies_first)))


UPDATER_MODES = ("adam", "adam_no_bias", "lamb", "lamb_no_bias", "adamax")


def _sparse_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    t, x, indices = specs[:3]
    axis = axis_in("sparse_accumulate_", attrs["axis"], len(t.shape))
    expected = (*t.shape[:axis], *indices.shape, *t.shape[axis + 1 :])
    if not indices.dtype.is_int:
        raise ValueError(f"sparse_accumulate_ indices must be integers, got {indices.dtype.name}")
    if x.shape != expected:
        raise ValueError(f"sparse_accumulate_: X must have shape {expected} (the gathered slices), got {x.shape}")
    return {**attrs, "axis": axis}


def _lower_sparse(ctx: LoweringContext, attrs: Attrs, t: jax.Array, x: jax.Array, i: jax.Array, *f: jax.Array) -> Any:
    # Each slice X[..., k, ...] is added (scaled by f) to the slice of t at indices[k] along `axis`; repeats add up.
    axis = attrs["axis"]
    size = t.shape[axis]
    check_indices(ctx, i, 0, size, f"sparse_accumulate_ along axis {axis}")
    scale = f[0].astype(jnp.float32) if f else jnp.float32(1)
    update = (x.astype(jnp.float32) * scale).astype(t.dtype)
    # Unchecked, a slice whose index is outside [0, size), negative ones too, adds to nothing.
    i = jnp.where((i >= 0) & (i < size), i, size)
    return [t.at[(slice(None),) * axis + (i,)].add(update, mode="drop")]


def _checked(attrs: Attrs) -> frozenset[Resource]:
    return frozenset({CHECK_RESULT})


SPARSE_ACCUMULATE = register(
    OpDef(
        "sparse_accumulate_",
        lambda specs, attrs: [specs[0]],
        _lower_sparse,
        normalise=_sparse_normalise,
        output_names=("sparse_accumulate_out",),
        effects=Effects(writes=_checked),
        aliasing=Aliasing(modifies=modifies_first),
    )
)


def _updater_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    m, v = specs[:2]
    if m.shape != v.shape:
        raise ValueError(f"adam_updater: the moments must share a shape, got {m.shape} and {v.shape}")
    if attrs["weight"] and specs[2].shape != m.shape:
        raise ValueError(f"adam_updater: the weight must have the moments' shape {m.shape}, got {specs[2].shape}")
    # popart's updater has the weight's type when a weight is given, else the first moment's.
    return [TensorSpec(m.shape, specs[2].dtype if attrs["weight"] else m.dtype)]


def _rounded(x: jax.Array, dtype: Any) -> jax.Array:
    """`x` rounded to `dtype` and held in float32 (or wider), even where XLA would keep excess precision.

    popart computes a float16 tensor's arithmetic in float16; each such step is computed here in float32
    and rounded, which gives the correctly rounded float16 result of an addition, a product, a quotient
    or a square root.
    """
    y = x.astype(dtype)
    if jnp.issubdtype(y.dtype, jnp.floating) and y.dtype.itemsize < 4:
        info = jnp.finfo(y.dtype)
        y = jax.lax.reduce_precision(y, exponent_bits=info.nexp, mantissa_bits=info.nmant)
    return y.astype(jnp.promote_types(y.dtype, jnp.float32))


def _lower_updater(ctx: LoweringContext, attrs: Attrs, *values: jax.Array) -> list[jax.Array]:
    """popart's AdamUpdater: mhat / (sqrt(vhat) + eps) (+ wd * w); AdaMax: mhat / (v + eps) (+ wd * w).

    The types are popart's: the first moment's bias correction is rounded to the first moment's type and
    `mhat` computed in it, the rest in the second moment's type, the weight decay in the weight's; the
    result has the weight's type when a weight is given, else the first moment's.
    """
    m, v, *rest = values
    w = rest.pop(0) if attrs["weight"] else None
    step = rest.pop(0) if attrs["step"] else None
    wd, b1, b2, eps = (jnp.asarray(r, jnp.float32) for r in rest)
    mode = attrs["mode"]
    out_type = w.dtype if w is not None else m.dtype
    m_type, v_type = m.dtype, v.dtype
    mhat, vhat = _rounded(m, m_type), _rounded(v, v_type)
    new_step = None
    if step is not None:
        new_step = step + 1
        t = new_step.astype(jnp.float32)
        if mode in ("adam", "lamb", "adamax"):
            mhat = _rounded(mhat / _rounded(1 - b1**t, m_type), m_type)
        if mode in ("adam", "lamb"):
            vhat = _rounded(vhat / _rounded(1 - b2**t, v_type), v_type)
    if mode != "adamax":
        vhat = _rounded(jnp.sqrt(vhat), v_type)
    denominator = _rounded(vhat + _rounded(eps, v_type), v_type)
    updater = _rounded(_rounded(mhat, v_type) / denominator, v_type)
    if w is not None:
        decay = _rounded(_rounded(wd, out_type) * _rounded(w, out_type), out_type)
        updater = _rounded(_rounded(updater, out_type) + decay, out_type)
    outs = [_rounded(updater, out_type).astype(out_type)]
    return outs if new_step is None else [*outs, new_step]


def _updater_modifies(attrs: Attrs) -> dict[int, int | None]:
    # The time step is incremented in place before it corrects the moments.
    return {3 if attrs["weight"] else 2: None} if attrs["step"] else {}


ADAM_UPDATER = register(
    OpDef(
        "adam_updater",
        _updater_infer,
        _lower_updater,
        output_names=("Updater",),
        aliasing=Aliasing(modifies=_updater_modifies, note="its step counter, when given"),
    )
)


def _lower_var_update(
    ctx: LoweringContext, attrs: Attrs, w: jax.Array, x: jax.Array, r1sq: jax.Array, r2sq: jax.Array, *rest: jax.Array
) -> list[jax.Array]:
    """popart's AdamVarUpdate: w -= lr * ratio * x, the LAMB trust ratio min(sqrt(r1sq), mwn) / sqrt(r2sq)
    being 1 where r1sq, r2sq or the max weight norm is 0."""
    lr, mwn = (jnp.asarray(r, jnp.float32) for r in rest)
    r1sq, r2sq = r1sq.astype(jnp.float32), r2sq.astype(jnp.float32)
    ratio = jnp.minimum(jnp.sqrt(r1sq), mwn) / jnp.sqrt(jnp.where(r2sq == 0, 1, r2sq))
    ratio = jnp.where((r1sq == 0) | (r2sq == 0) | (mwn == 0), jnp.float32(1), ratio)
    updated = w.astype(jnp.float32) - lr * ratio * x.astype(jnp.float32)
    return [updated.astype(w.dtype)]


ADAM_VAR_UPDATE = register(
    OpDef(
        "adam_var_update",
        lambda specs, attrs: [specs[0]],
        _lower_var_update,
        output_names=("adam_var_update_out",),
        aliasing=Aliasing(modifies=modifies_first),
    )
)
