"""popxl-addons' `popxl_addons.ops.fp8_utils`: its format descriptions, from `popxl_addons.core.fp8_formats`."""

from __future__ import annotations

from popxl_addons.core.fp8_formats import (
    FpDef,
    float8_143_def,
    float8_152_def,
    ieee_fp16_denorms,
    ieee_fp32_no_denorms,
)

__all__ = ["FpDef", "float8_143_def", "float8_152_def", "ieee_fp16_denorms", "ieee_fp32_no_denorms"]
