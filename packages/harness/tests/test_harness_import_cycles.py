"""No import circle among popxl_addons.harness' modules, imports inside functions included."""

from __future__ import annotations

from pathlib import Path

from popxl.import_circles import import_circles, plant_import

SRC = Path(__file__).parents[1] / "src"


def test_no_import_circle_among_the_harness_modules(tmp_path: Path) -> None:
    assert import_circles(SRC) == []
    # The check can fail: as plan_cli.py once took helpers from cli.py, which dispatches to it.
    planted = plant_import(SRC, tmp_path, "popxl_addons.harness.plan_cli", "popxl_addons.harness.cli")
    assert import_circles(planted) == [["popxl_addons.harness.cli", "popxl_addons.harness.plan_cli"]]
