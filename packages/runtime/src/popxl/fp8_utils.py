"""popxl's host conversions to and from its float8 representation (bytes in one-field structured types)."""

from __future__ import annotations

from typing import Any

import numpy as np

from popxl import dtypes
from popxl.utils import to_numpy

FLOAT8 = (dtypes.float8_143, dtypes.float8_152)


def _check_scale(log2_scale: int) -> None:
    if not -32 <= int(log2_scale) < 32:
        raise RuntimeError(f"log2_scale must be an int in [-32, 32), got {log2_scale}")


def host_pow2scale_cast_to_fp8(
    src: Any, dtype: dtypes.dtype | None = None, log2_scale: int = 0, nan_on_overflow: bool = True
) -> np.ndarray[Any, Any]:
    """`cast(src * 2**log2_scale, dtype)` on the host, rounding to nearest (ties to even), as popxl's float8
    bytes; values beyond the format's range become NaN, or its largest value without `nan_on_overflow`."""
    if dtype not in FLOAT8:
        raise RuntimeError(f"dtype {dtype} not currently supported.")
    _check_scale(log2_scale)
    values = to_numpy(src, downcast=False)
    if values.dtype not in (np.float16, np.float32, np.float64):
        raise RuntimeError(f"src.dtype {values.dtype} not currently supported.")
    fp8 = dtype.as_numpy()
    scaled = values.astype(np.float64) * 2.0**log2_scale
    if not nan_on_overflow:
        top = float(np.finfo(fp8).max)
        scaled = np.clip(scaled, -top, top)
    return dtypes.host_view(scaled.astype(fp8))


def host_pow2scale_cast_from_fp8(
    src: np.ndarray[Any, Any], dtype: dtypes.dtype | None = None, log2_scale: int = 0
) -> np.ndarray[Any, Any]:
    """`cast(src, dtype) * 2**log2_scale` on the host, from popxl's float8 bytes to float16, float32 or float64."""
    if src.dtype not in dtypes.FLOAT8_HOST:
        raise RuntimeError(f"src.dtype {src.dtype} not currently supported.")
    if dtype not in (dtypes.float16, dtypes.float32, dtypes.float64):
        raise RuntimeError(f"dtype {dtype} not currently supported.")
    _check_scale(log2_scale)
    values = dtypes.device_view(src).astype(np.float64) * 2.0**log2_scale
    return values.astype(dtype.as_numpy())


# The formats popxl's host scale search weighs: (exponent bits, mantissa bits, exponent bias, has denormals,
# spends an exponent code on NaN).
_FLOAT32 = (8, 23, 127, False, True)
_FLOAT8_FORMATS = {dtypes.float8_143: (4, 3, 8, True, False), dtypes.float8_152: (5, 2, 16, True, False)}
# The scales popxl weighs: log2 scales in [-31, 31].
_LOWEST_SCALE, _HIGHEST_SCALE = -31, 31


def _exponent_range(fmt: tuple[int, int, int, bool, bool]) -> tuple[int, int]:
    """The smallest and largest power of two of the format's values with an unscaled exponent."""
    exponent_bits, mantissa_bits, bias, denormals, nans = fmt
    lowest = 1 - bias - (mantissa_bits if denormals else 0)
    return lowest, (1 << exponent_bits) - 1 - int(nans) - bias


def host_fp8_mse_scale(src: np.ndarray[Any, Any], dtype: dtypes.dtype | None = None) -> tuple[float, int]:
    """popxl's host choice of the log2 scale `s` for casting `src * 2**s` to float8 `dtype` (1.4.3 unless
    float8_152 is asked): the scale of least squared error over a histogram of `src`'s exponents. Returns
    `(error, s)`, as popxl does (its annotation says int; it returns the pair).

    As popxl: every float16 or float32 source is histogrammed over float32's exponent range; the error of a
    bin below the scaled format's range counts its lower edge squared (plus half the smallest edge squared,
    once), inside it the edge squared times the format's quantisation error (relative to `src`'s own
    mantissa), above it the distance from the range's top edge (taken at the candidate's position, as
    popxl indexes it). Among tied scales the middle one is taken.
    """
    if src.dtype not in (np.float16, np.float32):
        raise RuntimeError(f"dtype {src.dtype} not currently supported.")
    target = _FLOAT8_FORMATS[dtypes.float8_152 if dtype is dtypes.float8_152 else dtypes.float8_143]
    lowest, highest = _exponent_range(_FLOAT32)
    edges = [2.0**k for k in range(lowest, highest)]
    # counts[0]: below the first edge; counts[i]: magnitudes whose frexp exponent is lowest + i.
    counts = np.zeros(len(edges) + 1)
    for value in np.abs(np.ascontiguousarray(src).reshape(-1).astype(np.float64)):
        if value < edges[0]:
            counts[0] += 1
        elif value > edges[-1]:
            counts[-1] += 1
        else:
            counts[int(np.frexp(value)[1]) - lowest] += 1
    share = counts / counts.sum()

    source_mantissa = 23 if src.dtype == np.float32 else 10
    quantisation_error = 2.0 ** (-2.0 * (source_mantissa - target[1]))
    target_lowest, target_highest = _exponent_range(target)
    span = target_highest - target_lowest + 1
    first = max(target_lowest + _LOWEST_SCALE - lowest, 0)
    last = min(target_lowest + _HIGHEST_SCALE - lowest, highest - lowest)
    errors: dict[float, list[int]] = {}
    for candidate, start in enumerate(range(first, last + 1)):
        error = 0.0
        for i in range(start):  # below the scaled range
            if i == 0:
                error += (edges[0] / 2) ** 2
            error += edges[i] ** 2 * share[i + 1]
        for i in range(start, min(start + span, len(edges))):  # inside it
            error += edges[i] ** 2 * share[i + 1] * quantisation_error
        for i in range(start + span, len(edges)):  # above it
            error += (edges[candidate + span - 1] - edges[i]) ** 2 * share[i + 1]
        errors.setdefault(error, []).append(candidate + _LOWEST_SCALE)
    least = min(errors)
    tied = sorted(errors[least])
    return least, -tied[len(tied) // 2]
