# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.cross_entropy_sharded_loss.cross_entropy_sharded_loss`, re-exporting the names of
`popxl_addons.collectives.cross_entropy_sharded`."""

from popxl_addons.collectives.cross_entropy_sharded import cross_entropy_sharded_loss

__all__ = ["cross_entropy_sharded_loss"]
