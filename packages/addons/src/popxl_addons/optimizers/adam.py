# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.optimizers.adam`, re-exporting the names of `popxl_addons.core.optimizers`."""

from popxl_addons.core.optimizers import AdamOptimizerStep

__all__ = ["AdamOptimizerStep"]
