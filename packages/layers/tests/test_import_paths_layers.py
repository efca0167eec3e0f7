"""popxl-addons' layer paths, across the core and layers distributions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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
        assert name in BY_MODULE["popxl_addons.layers"].names
    from popxl_addons.layers import Conv2D, Embedding, GroupNorm  # noqa: F401  (popxl-addons programs' import)


_HIDE_LAYERS = """
import sys
sys.path[:] = [p for p in sys.path if not p.startswith({layers_src!r})]
import popxl_addons as addons
assert not any(p.startswith({layers_src!r}) for p in addons.__path__), addons.__path__
assert addons.Module.__name__ == "Module"
try:
    addons.layers
except ModuleNotFoundError as e:
    print(type(e).__name__, e)
"""


def test_without_the_layers_distribution() -> None:
    """Only core installed: `addons.layers` names the distribution to install (editable layout)."""
    layers_src = Path(popxl_addons.layers.__file__).parents[2]
    if layers_src == Path(addons.__file__).parents[1]:
        pytest.skip("a regular install: the layers package shares core's folder and cannot be hidden here")
    code = _HIDE_LAYERS.format(layers_src=str(layers_src))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert (
        "MissingDistributionError popxl_addons.layers is shipped by the popxl-addons-layers distribution" in out.stdout
    )
    assert "pip install popxl-addons-layers" in out.stdout
