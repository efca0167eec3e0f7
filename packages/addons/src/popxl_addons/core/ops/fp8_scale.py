"""popxl-addons' choices of the power-of-two scale that casts a tensor to float8 (`fp8_amax_scale`, `fp8_mse_scale`).

Both give an int32 scalar `s` for `ops.pow2scale_cast_to_fp8(x, log2_scale=s)`, which casts `x * 2**s`.

`fp8_amax_scale` is popxl-addons' composition of popxl ops: `floor(log2(max_value / max(|x|)))`,
clipped to [-31, 31], where `max_value` is the format's largest value (240 or 57344) and log2 is
popxl's `log(t) / log(2)`. An all-zero `x` gives 31. popxl-addons divides in `x`'s type; here the
largest magnitude is cast to float32 first (exactly), because in float16 the ratio overflows once
max(|x|) is below 240 / 65504 (1.4.3) or 57344 / 65504 (1.5.2), and the scale would be 31 for any such
tensor, which overflows the cast it is meant for.

`fp8_mse_scale` is popxl-addons' custom op `Fp8Scale` (`fp8_mse_scale_impl.cpp`), here the op kind
`fp8_mse_scale`. It counts `|x|` in the 254 power-of-two bins [2**k, 2**(k+1)), k = -126 ... 127 (the
last open above; magnitudes below 2**-126, zeros among them, are not weighed), normalised by the number
of elements, and for each of 62 candidate scales adds up in float32, bin by bin in ascending order, the
squared error of the bins' lower edges `l` weighted by their share `h`: `h * l * l` for a bin below the
format's range, `h * l * l * q` for one inside it (`q` the quantisation error) and `h * (t - l) ** 2`
above it (`t` the range's top edge). Candidate `i` puts the range's lowest bin at index `i +
min_fp32_exp_index`. Where several candidates share the smallest error the op takes the first of them
plus half their number (the middle of a run of ties), and returns `-(i - 31)`, in [-30, 31].

What popxl-addons' op does that is kept here: 62 candidates (not the 63 of [-31, 31] that popart's host
`host_fp8_mse_scale` weighs); the top edge `t` of the range (the host weighs overflow against a far
smaller edge); and `q = 2 ** (-2 * (10 - mantissa bits))`, float16's mantissa for both source types,
since popxl-addons compares the popxl dtype with `np.float32`, which never holds. On evenly spread data
the two agree. popxl-addons gives the op no gradient, and neither does this op kind.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import popxl
from popxl import ops
from popxl.extension import Attrs, LoweringContext, OpDef, create_op, register
from popxl_addons.core.ops.fp8_formats import float8_def, ieee_fp16_denorms, ieee_fp32_no_denorms

__all__ = ["fp8_amax_scale", "fp8_mse_scale"]

MIN_SCALING_BIAS = -31
MAX_SCALING_BIAS = 31
# popxl-addons' op weighs 62 candidates (`Repeat(62, ...)`).
NUM_CANDIDATES = 62
# The float32 histogram's bin edges 2**-126 ... 2**127, exact in float32.
_EDGES = np.ldexp(np.float32(1), np.arange(-126, 128)).astype(np.float32)


def _check_source(op: str, dtype: popxl.dtype) -> None:
    if dtype not in (popxl.float16, popxl.float32):
        raise RuntimeError(f"{op}: the source tensor must be float16 or float32, got {dtype}")


def _mse_infer(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> list[popxl.TensorSpec]:
    (src,) = specs
    _check_source("fp8_mse_scale", src.dtype)
    if math.prod(src.shape) == 0:
        raise ValueError(f"fp8_mse_scale needs a non-empty source tensor, got shape {src.shape}")
    return [popxl.TensorSpec((), popxl.int32)]


def _mse_lower(ctx: LoweringContext, attrs: Attrs, src: Any) -> list[Any]:
    edges = jnp.asarray(_EDGES)
    magnitudes = jnp.abs(src.reshape(-1).astype(jnp.float32))
    # Bin 0 holds what is below 2**-126 (and NaN); bin k + 1 holds [edges[k], edges[k + 1]).
    bins = jnp.where(jnp.isnan(magnitudes), 0, jnp.searchsorted(edges, magnitudes, side="right"))
    counts = jnp.bincount(bins, length=len(_EDGES) + 1).astype(jnp.float32)
    share = counts[1:] / jnp.float32(magnitudes.size)
    # popxl-addons' loop starts at the second bin (counter 1): the first one is never weighed.
    h, low = share[1:, None], edges[1:, None]
    index = jnp.arange(1, len(_EDGES))[:, None]
    first = attrs["min_fp32_exp_index"] + jnp.arange(NUM_CANDIDATES)[None, :]
    end = first + attrs["format_span"]
    top = edges[end - 1]
    squares = h * low * low
    beyond = top - low
    terms = jnp.where(
        index < first,
        squares,
        jnp.where(index < end, squares * jnp.float32(attrs["quantisation_error"]), h * beyond * beyond),
    )
    # One float32 sum per candidate, bin after bin as the op adds them.
    mse, _ = jax.lax.scan(lambda acc, row: (acc + row, None), jnp.zeros(NUM_CANDIDATES, jnp.float32), terms)
    ties = jnp.sum(mse == jnp.min(mse))
    best = jnp.argmin(mse) + ties // 2
    return [(MAX_SCALING_BIAS - best).astype(jnp.int32)]


FP8_MSE_SCALE = register(OpDef("fp8_mse_scale", _mse_infer, _mse_lower, output_names=("scaling_bias",)))


def fp8_mse_scale(src: popxl.Tensor, dtype: popxl.dtype = popxl.float8_143) -> popxl.Tensor:
    """The int32 log2 scale for casting float16 or float32 `src` to float8 `dtype` with the least squared error."""
    _check_source("fp8_mse_scale", src.dtype)
    dest = float8_def(dtype)
    attrs = {
        "min_fp32_exp_index": dest.min_exp + MIN_SCALING_BIAS - ieee_fp32_no_denorms.min_exp,
        "format_span": dest.max_exp - dest.min_exp + 1,
        "quantisation_error": 2.0 ** (-2.0 * (ieee_fp16_denorms.num_mantissa_bits - dest.num_mantissa_bits)),
    }
    return create_op(FP8_MSE_SCALE, [src], attrs)[0]


def fp8_amax_scale(src: popxl.Tensor, dtype: popxl.dtype = popxl.float8_143) -> popxl.Tensor:
    """The int32 log2 scale that brings the largest magnitude of float16 or float32 `src` within float8 `dtype`."""
    _check_source("fp8_amax_scale", src.dtype)
    dest = float8_def(dtype)
    ratio = float(dest.max_value) / ops.cast(ops.max(ops.abs(src)), popxl.float32)
    log2 = ops.log(ratio) / ops.log(popxl.constant(2, popxl.float32))
    return ops.clip(ops.cast(ops.floor(log2), popxl.int32), MIN_SCALING_BIAS, MAX_SCALING_BIAS)
