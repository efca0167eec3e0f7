# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.linear_layout`, re-exporting its sub-modules' names."""

from popxl_addons.ops.linear_layout.linear_layout import linear_layout

__all__ = ["linear_layout"]
