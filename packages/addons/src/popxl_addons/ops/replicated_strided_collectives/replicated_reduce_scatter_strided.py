# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.replicated_strided_collectives.replicated_reduce_scatter_strided`, re-exporting the
names of `popxl_addons.collectives.strided`."""

from popxl_addons.collectives.strided import replicated_reduce_scatter_strided

__all__ = ["replicated_reduce_scatter_strided"]
