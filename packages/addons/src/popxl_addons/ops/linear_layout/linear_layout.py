# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.linear_layout.linear_layout`, re-exporting the names of
`popxl_addons.core.ops.linear_layout`."""

from popxl_addons.core.ops.linear_layout import linear_layout

__all__ = ["linear_layout"]
