# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.layers`: Linear, LayerNorm, GroupNorm, Conv2D, Embedding, Scale and the FP8 and
group-quantised linears."""

from popxl_addons.layers.conv import Conv2D
from popxl_addons.layers.embedding import MULTISLICE_MAGIC_NUMBER, Embedding
from popxl_addons.layers.group_norm import GroupNorm
from popxl_addons.layers.layer_norm import LayerNorm
from popxl_addons.layers.linear import Linear
from popxl_addons.layers.linear_fp8 import LinearFP8
from popxl_addons.layers.linear_gq import LinearGQ
from popxl_addons.layers.scale import Scale

__all__ = [
    "Conv2D",
    "MULTISLICE_MAGIC_NUMBER",
    "Embedding",
    "GroupNorm",
    "LayerNorm",
    "Linear",
    "LinearFP8",
    "LinearGQ",
    "Scale",
]
