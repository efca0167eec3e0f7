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
