# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.fp8_utils`, re-exporting the names of `popxl_addons.core.ops.fp8_formats`."""

from popxl_addons.core.ops.fp8_formats import (
    FpDef,
    float8_143_def,
    float8_152_def,
    ieee_fp16_denorms,
    ieee_fp32_no_denorms,
)

__all__ = ["FpDef", "float8_143_def", "float8_152_def", "ieee_fp16_denorms", "ieee_fp32_no_denorms"]
