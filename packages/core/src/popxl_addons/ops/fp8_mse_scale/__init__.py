"""popxl-addons' custom op package `popxl_addons.ops.fp8_mse_scale`: its function, from `popxl_addons.core`.

As in popxl-addons, `popxl_addons.ops.fp8_mse_scale.fp8_mse_scale` is the function, bound over the
sub-module of the same name.
"""

from __future__ import annotations

from popxl_addons.ops.fp8_mse_scale.fp8_mse_scale import fp8_mse_scale

__all__ = ["fp8_mse_scale"]
