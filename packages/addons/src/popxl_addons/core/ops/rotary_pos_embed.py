"""popxl-addons' `RotaryPosEmbed` custom op (RoPE, RoFormer) and its trig tables.

A tensor `t` of shape `(batch, seq, heads, hh)` has its first `rotary_dim` features read
as `rotary_dim / 2` complex numbers, interleaved (`t[..., 2i]` real, `t[..., 2i + 1]`
imaginary); the one at position `m` and pair `i` is multiplied by `exp(j * m * θ_i)`:

    y[..., 2i]     = t[..., 2i] * cos - t[..., 2i + 1] * sin
    y[..., 2i + 1] = t[..., 2i + 1] * cos + t[..., 2i] * sin

with `sin`, `cos` of shape `(1 or batch, seq, rotary_dim / 2)` (rank-2 tables get a
leading 1), broadcast over the heads. The remaining features pass through. The gradient
is the inverse rotation of the output gradient (`sin` negated); popart gives the tables
no gradient (here they have their exact one, built only when asked for). Each output
element is computed in float32 and rounded once to `t`'s type.
`trig_tables` gives `sin(m θ_i)`, `cos(m θ_i)` for `θ_i = base ** (-2i / rotary_dim)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

import popxl
from popxl import ops
from popxl.extension import Attrs, GradBuilder, LoweringContext, Op, OpDef, create_op, register

__all__ = ["rotary_pos_embed", "trig_table_constants", "trig_tables"]


def _normalise(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> dict[str, Any]:
    t, sin, cos = specs
    if len(t.shape) != 4:
        raise ValueError(f"rotary_pos_embed needs a tensor of rank 4 (batch, seq, heads, hh), got shape {t.shape}")
    rotary_dim = int(attrs["rotary_dim"])
    if rotary_dim % 2 or not 0 < rotary_dim <= t.shape[3]:
        raise ValueError(f"rotary_dim must be even and in (0, {t.shape[3]}], got {rotary_dim}")
    for name, table in (("sin", sin), ("cos", cos)):
        if len(table.shape) != 3:
            raise ValueError(
                f"rotary_pos_embed's {name} needs rank 3 (1 or batch, seq, rotary_dim/2), got {table.shape}"
            )
        if table.shape[0] not in (1, t.shape[0]) or table.shape[1:] != (t.shape[1], rotary_dim // 2):
            raise ValueError(
                f"rotary_pos_embed's {name} of shape {table.shape} does not fit a tensor of shape {t.shape} "
                f"with rotary_dim {rotary_dim}: expected (1 or {t.shape[0]}, {t.shape[1]}, {rotary_dim // 2})"
            )
        if not table.dtype.is_floating_point:
            raise ValueError(f"rotary_pos_embed's {name} must be floating point, got {table.dtype}")
    return {"rotary_dim": rotary_dim}


def _infer(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> list[popxl.TensorSpec]:
    if not specs[0].dtype.is_floating_point:
        raise ValueError(f"rotary_pos_embed rotates floating point tensors, got {specs[0].dtype}")
    return [specs[0]]


def _rotate(x: Any, sin: Any, cos: Any, rotary_dim: int, direction: float) -> Any:
    """`x`'s first `rotary_dim` features rotated by the angles of the tables (`direction` -1: backwards)."""
    b, s, h, hh = x.shape
    pairs = x[..., :rotary_dim].astype(jnp.float32).reshape(b, s, h, rotary_dim // 2, 2)
    real, imag = pairs[..., 0], pairs[..., 1]
    sin32 = direction * sin.astype(jnp.float32)[:, :, None, :]
    cos32 = cos.astype(jnp.float32)[:, :, None, :]
    rotated = jnp.stack([real * cos32 - imag * sin32, imag * cos32 + real * sin32], axis=-1)
    out = rotated.reshape(b, s, h, rotary_dim).astype(x.dtype)
    return jnp.concatenate([out, x[..., rotary_dim:]], axis=-1) if rotary_dim < hh else out


def _lower(ctx: LoweringContext, attrs: Attrs, t: Any, sin: Any, cos: Any) -> list[Any]:
    return [_rotate(t, sin, cos, attrs["rotary_dim"], 1.0)]


def _lower_grad(ctx: LoweringContext, attrs: Attrs, dy: Any, sin: Any, cos: Any) -> list[Any]:
    return [_rotate(dy, sin, cos, attrs["rotary_dim"], -1.0)]


def _lower_tables_grad(ctx: LoweringContext, attrs: Attrs, t: Any, dy: Any) -> list[Any]:
    """The gradients of the tables: summed over the heads, and over the batch where a table has one row."""
    b, s, h, _ = t.shape
    rd = attrs["rotary_dim"]
    x = t[..., :rd].astype(jnp.float32).reshape(b, s, h, rd // 2, 2)
    d = dy[..., :rd].astype(jnp.float32).reshape(b, s, h, rd // 2, 2)
    dsin = jnp.sum(d[..., 1] * x[..., 0] - d[..., 0] * x[..., 1], axis=2)
    dcos = jnp.sum(d[..., 0] * x[..., 0] + d[..., 1] * x[..., 1], axis=2)
    out = []
    for g, (rows, dtype) in zip((dsin, dcos), attrs["tables"]):
        out.append((g if rows == b else jnp.sum(g, axis=0, keepdims=True)).astype(dtype))
    return out


def _infer_tables_grad(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> list[popxl.TensorSpec]:
    t = specs[0]
    return [popxl.TensorSpec((rows, t.shape[1], attrs["rotary_dim"] // 2), dtype) for rows, dtype in attrs["tables"]]


def _grad(gb: GradBuilder, op: Op, out_grads: Sequence[popxl.Tensor | None]) -> list[popxl.Tensor | None]:
    (dy,) = out_grads
    if dy is None:
        return [None, None, None]
    t, sin, cos = op.inputs
    result: list[popxl.Tensor | None] = [None, None, None]
    if gb.wants(t):
        result[0] = create_op(ROTARY_POS_EMBED_GRAD, [dy, gb.fwd(sin), gb.fwd(cos)], dict(op.attrs))[0]
    if gb.wants(sin) or gb.wants(cos):
        # popart gives the tables no gradient; here they have the exact one, should a program ask for it.
        attrs = {**op.attrs, "tables": [(sin.shape[0], sin.dtype.as_numpy()), (cos.shape[0], cos.dtype.as_numpy())]}
        dsin, dcos = create_op(ROTARY_POS_EMBED_TABLES_GRAD, [gb.fwd(t), dy], attrs)
        result[1], result[2] = dsin, dcos
    return result


ROTARY_POS_EMBED = register(
    OpDef("rotary_pos_embed", _infer, _lower, grad=_grad, normalise=_normalise, output_names=("t_rotated",))
)
# popart's RotaryPosEmbedGradOp: the inverse rotation of the output gradient; it has no gradient itself.
ROTARY_POS_EMBED_GRAD = register(
    OpDef(
        "rotary_pos_embed_grad",
        _infer,
        _lower_grad,
        normalise=_normalise,
        output_names=("rotary_pos_embed_grad_out",),
    )
)
ROTARY_POS_EMBED_TABLES_GRAD = register(
    OpDef(
        "rotary_pos_embed_tables_grad",
        _infer_tables_grad,
        _lower_tables_grad,
        output_names=("rotary_pos_embed_sin_grad", "rotary_pos_embed_cos_grad"),
    )
)


def trig_tables(
    seq_len: int, rotary_dim: int, base: int = 10000, np_dtype: Any = "float32"
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """`(sin, cos)` of the angles `m * θ_i`, shape `(seq_len, rotary_dim // 2)`: position `m` in
    `[0, seq_len)`, `θ_i = base ** (-2i / rotary_dim)` for `i` in `[0, rotary_dim // 2)`."""
    dt = np.dtype(np_dtype)
    exponents = np.arange(0, rotary_dim, 2).astype(dt) / dt.type(rotary_dim)
    thetas = np.power(dt.type(base), -exponents)
    angles = np.multiply.outer(np.arange(seq_len).astype(dt), thetas)
    return np.sin(angles), np.cos(angles)


def trig_table_constants(
    seq_len: int, rotary_dim: int, base: int = 10000, dtype: popxl.dtype = popxl.float32
) -> tuple[popxl.Tensor, popxl.Tensor]:
    """`trig_tables` as popxl constants of `dtype`: `(sin, cos)`."""
    sin, cos = trig_tables(seq_len, rotary_dim, base, dtype.as_numpy())
    return popxl.constant(sin, dtype), popxl.constant(cos, dtype)


def rotary_pos_embed(
    t: popxl.Tensor, sin: popxl.Tensor, cos: popxl.Tensor, rotary_dim: int | None = None
) -> popxl.Tensor:
    """`t` (batch, seq, heads, hh) with its first `rotary_dim` features (all when None or 0) rotated by RoPE,
    with tables from `trig_tables` of shape (seq, rotary_dim/2) or (1 or batch, seq, rotary_dim/2)."""
    rotary_dim = rotary_dim or t.shape[-1]
    if sin.rank == 2:
        sin = ops.reshape(sin, (1, *sin.shape))
    if cos.rank == 2:
        cos = ops.reshape(cos, (1, *cos.shape))
    return create_op(ROTARY_POS_EMBED, [t, sin, cos], {"rotary_dim": rotary_dim})[0]
