# Generated from the table in popxl_addons/_paths.py by `python -m popxl_addons._shells`; do not edit.
"""popxl-addons' `popxl_addons.layers.layer_norm_distributed`: the layer is built on a collective op, so
popxl-addons-collectives ships it and is imported on first use: popxl-addons-layers installs without it."""

from typing import TYPE_CHECKING

from popxl_addons._lazy import on_first_use

if TYPE_CHECKING:
    from popxl_addons.collectives.layer_norm_distributed_layer import LayerNormDistributed

__all__ = ["LayerNormDistributed"]

_ON_FIRST_USE = {"LayerNormDistributed": "popxl_addons.collectives.layer_norm_distributed_layer"}
__getattr__ = on_first_use(__name__, _ON_FIRST_USE)
