"""popxl-addons' `popxl_addons.optimizers`: its optimizer steps."""

from __future__ import annotations

from popxl_addons.optimizers.adam import AdamOptimizerStep

__all__ = ["AdamOptimizerStep"]
