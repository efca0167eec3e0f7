"""popxl-addons' descriptions of the floating point formats its float8 scale choices weigh (`fp8_utils`).

A format with `num_exp_bits` exponent bits, `num_mantissa_bits` mantissa bits and exponent bias
`fix_exponent_bias` represents magnitudes whose exponent lies in `[min_exp, max_exp]` (`min_exp` counts
the denormals where `include_denorm`), up to `max_value`. The float8 formats are popart's: 1.4.3
(`popxl.float8_143`, bias 8, largest value 240) and 1.5.2 (`popxl.float8_152`, bias 16, largest value
57344), neither with NaN codes. As in popxl-addons, float32 is described without its denormals and
float16 with them.
"""

from __future__ import annotations

from typing import NamedTuple

import popxl

__all__ = [
    "FpDef",
    "float8_143_def",
    "float8_152_def",
    "float8_def",
    "ieee_fp16_denorms",
    "ieee_fp32_no_denorms",
]


class FpDef(NamedTuple):
    """One floating point format: its bit fields and the exponents and largest value it represents."""

    num_exp_bits: int
    num_mantissa_bits: int
    fix_exponent_bias: int
    include_denorm: bool
    has_nans: bool
    max_value: float
    max_exp: int
    min_exp: int


ieee_fp32_no_denorms = FpDef(8, 23, 127, False, True, 3.4028235e38, 127, -126)
ieee_fp16_denorms = FpDef(5, 10, 15, True, True, 65504, 15, -14)
float8_152_def = FpDef(5, 2, 16, True, False, 57344, 15, -17)
float8_143_def = FpDef(4, 3, 8, True, False, 240, 7, -10)


def float8_def(dtype: popxl.dtype) -> FpDef:
    """The description of the float8 format `dtype` (`popxl.float8_143` or `popxl.float8_152`)."""
    if dtype is popxl.float8_143:
        return float8_143_def
    if dtype is popxl.float8_152:
        return float8_152_def
    raise TypeError(f"The float8 format must be popxl.float8_143 or popxl.float8_152, got {dtype}")
