"""popxl-addons' `popxl_addons.ops.fp8_amax_scale`, re-exporting `popxl_addons.core.fp8_scale.fp8_amax_scale`."""

from __future__ import annotations

from popxl_addons.core.fp8_scale import fp8_amax_scale

__all__ = ["fp8_amax_scale"]
