# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.layer_norm_distributed`, re-exporting its sub-modules' names."""

from popxl_addons.ops.layer_norm_distributed.layer_norm_distributed import layer_norm_distributed

__all__ = ["layer_norm_distributed"]
