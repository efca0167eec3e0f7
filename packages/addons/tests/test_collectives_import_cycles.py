"""No import circle among the modules popxl-addons-collectives ships, imports inside functions included."""

from __future__ import annotations

from pathlib import Path

from popxl.import_circles import import_circles, plant_import

SRC = Path(__file__).parents[1] / "src"


def test_no_import_circle_among_the_collectives_modules(tmp_path: Path) -> None:
    assert import_circles(SRC) == []
    # The check can fail: strided.py imports all_reduce_tp.py, so the other way round is a circle.
    planted = plant_import(SRC, tmp_path, "popxl_addons.collectives.all_reduce_tp", "popxl_addons.collectives.strided")
    circle = ["popxl_addons.collectives.all_reduce_tp", "popxl_addons.collectives.strided"]
    assert import_circles(planted) == [circle]
