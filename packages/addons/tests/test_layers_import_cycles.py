"""No import circle among popxl_addons.layers' modules, imports inside functions included."""

from __future__ import annotations

from pathlib import Path

from popxl.import_circles import import_circles, plant_import

SRC = Path(__file__).parents[1] / "src"


def test_no_import_circle_among_the_layers_modules(tmp_path: Path) -> None:
    assert import_circles(SRC) == []
    # The check can fail: linear.py imports init.py, so init.py importing linear.py is a circle.
    planted = plant_import(SRC, tmp_path, "popxl_addons.layers.init", "popxl_addons.layers.linear")
    assert import_circles(planted) == [["popxl_addons.layers.init", "popxl_addons.layers.linear"]]
