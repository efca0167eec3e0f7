# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.cross_entropy_sharded_wr_loss`, re-exporting its sub-modules' names."""

from popxl_addons.ops.cross_entropy_sharded_wr_loss.cross_entropy_sharded_wr_loss import cross_entropy_sharded_wr_loss

__all__ = ["cross_entropy_sharded_wr_loss"]
