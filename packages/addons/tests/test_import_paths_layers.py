"""popxl-addons' layer paths."""

from __future__ import annotations

import popxl_addons as addons
import popxl_addons.layers
import popxl_addons.layers.conv
import popxl_addons.layers.embedding
import popxl_addons.layers.group_norm
import popxl_addons.layers.layer_norm
import popxl_addons.layers.linear
from popxl_addons._paths import BY_MODULE


def test_layers_through_popxl_addons_paths() -> None:
    assert addons.layers is popxl_addons.layers
    assert addons.layers.Linear is popxl_addons.layers.linear.Linear
    assert addons.layers.LayerNorm is popxl_addons.layers.layer_norm.LayerNorm
    assert issubclass(addons.layers.Linear, addons.Module)


def test_embedding_group_norm_and_conv_through_popxl_addons_paths() -> None:
    assert addons.layers.Embedding is popxl_addons.layers.embedding.Embedding
    assert addons.layers.MULTISLICE_MAGIC_NUMBER == popxl_addons.layers.embedding.MULTISLICE_MAGIC_NUMBER == 16
    assert addons.layers.GroupNorm is popxl_addons.layers.group_norm.GroupNorm
    assert addons.layers.Conv2D is popxl_addons.layers.conv.Conv2D
    for name in ("Embedding", "MULTISLICE_MAGIC_NUMBER", "GroupNorm", "Conv2D"):
        assert name in BY_MODULE["popxl_addons.layers"].names()
    from popxl_addons.layers import Conv2D, Embedding, GroupNorm  # noqa: F401  (popxl-addons programs' import)
