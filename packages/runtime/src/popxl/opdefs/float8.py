"""popxl's float8 ops: scaled casts to and from float8, and matmuls and convolutions of float8 operands.

Every op takes an int32 scalar `log2_scale` in [-32, 32) and scales by
`2**log2_scale`: before casting to float8, after casting from it, and on the
result of a matmul or convolution, whose output is float16 as popart's is.
Casting to float8 rounds to nearest (ties to even) and gives NaN beyond the
format's range. A scale outside [-32, 32) fails the run (`OutOfRangeError`)
while the session option `throwIfLog2ScaleTensorNotInRange` is True (popart's
default); otherwise, or without run-time checks, it is clamped into the range.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from popxl import dtypes
from popxl.op import CHECK_RESULT, Attrs, Effects, OpDef, PopartFacts, Resource, register
from popxl.opdefs import conv, linalg
from popxl.opdefs.linalg import matmul_shape
from popxl.tensor import TensorSpec

FLOAT8 = (dtypes.float8_143, dtypes.float8_152)


def _check_scale(spec: TensorSpec) -> None:
    if spec.shape != ():
        raise ValueError("Log2 scale argument must be a scalar tensor")
    if spec.dtype is not dtypes.int32:
        raise TypeError("Log2 scale tensor must be of type popxl.int32")


def _check_float8(name: str, specs: Sequence[TensorSpec]) -> None:
    if any(s.dtype not in FLOAT8 for s in specs):
        raise TypeError(f"{name} operands must be of dtype popxl.float8_143 or popxl.float8_152")


def _scale(ctx: Any, log2_scale: jax.Array, op: str) -> jax.Array:
    """`2**log2_scale`; a run-time check refuses a scale outside [-32, 32) unless the session option
    `throwIfLog2ScaleTensorNotInRange` is False (then it is clamped), as in popart."""
    if ctx.option("throwIfLog2ScaleTensorNotInRange", True):
        shifted = log2_scale.astype(jnp.int32) + 32
        ok = (shifted >= 0) & (shifted < 64)
        ctx.check(ok, f"{op} log2_scale", shifted, 64, lambda i: f"log2_scale {i - 32}, outside [-32, 32)")
    # ldexp scales by an exact power of two (exp2 here is not exact).
    return jnp.ldexp(jnp.float32(1), jnp.clip(log2_scale, -32, 31).astype(jnp.int32))


def _checked(attrs: Attrs) -> frozenset[Resource]:
    return frozenset({CHECK_RESULT})


def _cast_to_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    _check_scale(specs[1])
    if attrs["data_type"] not in FLOAT8:
        raise TypeError(f"Data type {attrs['data_type']} not supported for pow2scale_cast_to_fp8")
    return [TensorSpec(specs[0].shape, attrs["data_type"])]


def _lower_cast_to(ctx: Any, attrs: Attrs, x: jax.Array, log2_scale: jax.Array) -> list[jax.Array]:
    scale = _scale(ctx, log2_scale, "pow2scale_cast_to_fp8")
    return [(x.astype(jnp.float32) * scale).astype(attrs["data_type"].as_numpy())]


def _cast_from_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    _check_scale(specs[1])
    _check_float8("pow2scale_cast_from_fp8", specs[:1])
    if attrs["data_type"] not in (dtypes.float16, dtypes.float32):
        raise TypeError(f"Data type {attrs['data_type']} not supported for pow2scale_cast_from_fp8")
    return [TensorSpec(specs[0].shape, attrs["data_type"])]


def _lower_cast_from(ctx: Any, attrs: Attrs, x: jax.Array, log2_scale: jax.Array) -> list[jax.Array]:
    scale = _scale(ctx, log2_scale, "pow2scale_cast_from_fp8")
    return [(x.astype(jnp.float32) * scale).astype(attrs["data_type"].as_numpy())]


POW2SCALE_CAST_TO_FP8 = register(
    OpDef("pow2scale_cast_to_fp8", _cast_to_infer, _lower_cast_to, effects=Effects(writes=_checked))
)
POW2SCALE_CAST_FROM_FP8 = register(
    OpDef("pow2scale_cast_from_fp8", _cast_from_infer, _lower_cast_from, effects=Effects(writes=_checked))
)


def _matmul_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    a, b, log2_scale = specs
    _check_float8("matmul_pow2scaled", (a, b))
    _check_scale(log2_scale)
    return [TensorSpec(matmul_shape(a.shape, b.shape), dtypes.float16)]


def _lower_matmul(ctx: Any, attrs: Attrs, a: jax.Array, b: jax.Array, log2_scale: jax.Array) -> list[jax.Array]:
    product = jnp.matmul(a.astype(jnp.float32), b.astype(jnp.float32))
    return [(product * _scale(ctx, log2_scale, "matmul_pow2scaled")).astype(jnp.float16)]


# popart's MatMul and convolution ops, on float8 operands: the same settings.
MATMUL_POW2SCALED = register(
    OpDef(
        "matmul_pow2scaled",
        _matmul_infer,
        _lower_matmul,
        effects=Effects(writes=_checked),
        popart=PopartFacts(ipu_settings=linalg.MATMUL.popart.ipu_settings),
    )
)


def _scaled(base: OpDef, name: str) -> OpDef:
    """`base` (a convolution) on float8 operands, its float16 result scaled by `2**log2_scale` (input 2)."""

    def normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
        _check_float8(name, specs[:2])
        _check_scale(specs[2])
        assert base.normalise is not None
        return base.normalise(specs[:2], attrs)

    def infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
        (out,) = base.infer(specs[:2], attrs)
        return [TensorSpec(out.shape, dtypes.float16)]

    def lower(ctx: Any, attrs: Attrs, x: jax.Array, w: jax.Array, log2_scale: jax.Array) -> list[jax.Array]:
        (out,) = base.lower(ctx, attrs, x.astype(jnp.float32), w.astype(jnp.float32))
        return [(out * _scale(ctx, log2_scale, name)).astype(jnp.float16)]

    return register(
        OpDef(
            name,
            infer,
            lower,
            normalise=normalise,
            effects=Effects(writes=_checked),
            popart=PopartFacts(ipu_settings=base.popart.ipu_settings),
        )
    )


CONV_POW2SCALED = _scaled(conv.CONV, "conv_pow2scaled")
CONV_TRANSPOSE_POW2SCALED = _scaled(conv.CONV_TRANSPOSE, "conv_transpose_pow2scaled")
