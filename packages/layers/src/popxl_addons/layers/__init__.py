"""popxl-addons layers: Linear, LayerNorm and Scale."""

from popxl_addons import _compat
from popxl_addons.layers.layer_norm import LayerNorm
from popxl_addons.layers.linear import Linear
from popxl_addons.layers.scale import Scale

__all__ = ["LayerNorm", "Linear", "Scale"]

# popxl-addons layers that this project does not implement yet (their modules, e.g.
# `popxl_addons.layers.embedding`, import and raise the same error on use).
__getattr__ = _compat.not_implemented(__name__, ["Embedding", "MULTISLICE_MAGIC_NUMBER", "GroupNorm", "Conv2D"])
