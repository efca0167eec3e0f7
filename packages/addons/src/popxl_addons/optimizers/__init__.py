# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.optimizers`, re-exporting its sub-modules' names."""

from popxl_addons.optimizers.adam import AdamOptimizerStep

__all__ = ["AdamOptimizerStep"]
