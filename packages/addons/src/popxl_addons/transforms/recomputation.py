# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.transforms.recomputation`, re-exporting the names of
`popxl_addons.core.transforms.recomputation`."""

from popxl_addons.core.transforms.recomputation import add_recompute_inputs, recompute_graph

__all__ = ["add_recompute_inputs", "recompute_graph"]
