# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.transforms.repeat_graph`, re-exporting the names of
`popxl_addons.core.transforms.repeat_graph`."""

from popxl_addons.core.transforms.repeat_graph import repeat_graph

__all__ = ["repeat_graph"]
