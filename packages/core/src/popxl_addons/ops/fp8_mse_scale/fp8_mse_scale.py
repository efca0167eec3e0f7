"""popxl-addons' `popxl_addons.ops.fp8_mse_scale.fp8_mse_scale`, re-exporting `popxl_addons.core.fp8_scale`'s."""

from __future__ import annotations

from popxl_addons.core.fp8_scale import fp8_mse_scale

__all__ = ["fp8_mse_scale"]
