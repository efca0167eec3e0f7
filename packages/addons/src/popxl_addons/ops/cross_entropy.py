# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.cross_entropy`, re-exporting the names of `popxl_addons.core.ops.cross_entropy`."""

from popxl_addons.core.ops.cross_entropy import cross_entropy, cross_entropy_with_grad

__all__ = ["cross_entropy", "cross_entropy_with_grad"]
