"""popxl-addons layers: Linear, LayerNorm and Scale."""

from popxl_addons.layers.layer_norm import LayerNorm
from popxl_addons.layers.linear import Linear
from popxl_addons.layers.scale import Scale

__all__ = ["LayerNorm", "Linear", "Scale"]
