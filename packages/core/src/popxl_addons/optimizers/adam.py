"""popxl-addons' `popxl_addons.optimizers.adam`, re-exporting what this project has (`popxl_addons.core.optimizers`)."""

from __future__ import annotations

from popxl_addons.core.optimizers import AdamOptimizerStep

__all__ = ["AdamOptimizerStep"]
