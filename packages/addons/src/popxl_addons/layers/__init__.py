"""popxl-addons layers: Linear, LayerNorm, GroupNorm, Conv2D, Embedding and Scale."""

from popxl_addons.layers.conv import Conv2D
from popxl_addons.layers.embedding import MULTISLICE_MAGIC_NUMBER, Embedding
from popxl_addons.layers.group_norm import GroupNorm
from popxl_addons.layers.layer_norm import LayerNorm
from popxl_addons.layers.linear import Linear
from popxl_addons.layers.linear_fp8 import LinearFP8
from popxl_addons.layers.linear_gq import LinearGQ
from popxl_addons.layers.scale import Scale

__all__ = [
    "MULTISLICE_MAGIC_NUMBER",
    "Conv2D",
    "Embedding",
    "GroupNorm",
    "LayerNorm",
    "Linear",
    "LinearFP8",
    "LinearGQ",
    "Scale",
]
