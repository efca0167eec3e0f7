"""popxl-addons' `popxl_addons.ops.fp8_utils`; this project has none of its names yet."""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(
    __name__,
    ["FpDef", "ieee_fp32_no_denorms", "ieee_fp16_denorms", "float8_152_def", "float8_143_def"],
    owner="popxl_addons.core",
)
