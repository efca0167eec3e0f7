# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.layers.layer_norm_distributed`, re-exporting the names of
`popxl_addons.collectives.layer_norm_distributed_layer`."""

from popxl_addons.collectives.layer_norm_distributed_layer import LayerNormDistributed

__all__ = ["LayerNormDistributed"]
