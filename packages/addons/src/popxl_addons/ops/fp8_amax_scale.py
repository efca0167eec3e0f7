# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.fp8_amax_scale`, re-exporting the names of `popxl_addons.core.ops.fp8_scale`."""

from popxl_addons.core.ops.fp8_scale import fp8_amax_scale

__all__ = ["fp8_amax_scale"]
