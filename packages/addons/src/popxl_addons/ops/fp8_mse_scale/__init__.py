# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.fp8_mse_scale`, re-exporting its sub-modules' names."""

from popxl_addons.ops.fp8_mse_scale.fp8_mse_scale import fp8_mse_scale

__all__ = ["fp8_mse_scale"]
