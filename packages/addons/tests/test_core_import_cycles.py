"""No import circle among the modules popxl-addons-core ships, imports inside functions included."""

from __future__ import annotations

from pathlib import Path

from popxl.import_circles import import_circles, plant_import

SRC = Path(__file__).parents[1] / "src"


def test_no_import_circle_among_the_core_modules(tmp_path: Path) -> None:
    assert import_circles(SRC) == []
    # The check can fail: as graph.py once imported autodiff in a method, autodiff importing graph.
    graph, autodiff = "popxl_addons.core.modules.graph", "popxl_addons.core.transforms.autodiff"
    planted = plant_import(SRC, tmp_path, graph, autodiff)
    assert any({graph, autodiff} <= set(c) for c in import_circles(planted))
