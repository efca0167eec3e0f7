"""No import circle among the modules of any package's sources, imports inside functions included; and the
checker itself (tools/import_circles.py): what counts as an import, and a planted import found as a circle."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.import_circles import import_circles, import_graph, imported_modules, plant_import

SOURCES = sorted((Path(__file__).resolve().parents[2] / "packages").glob("*/src"))

# Per package, imports that would close a circle among its modules, so the check is seen to fail there: a
# module, and one it would import that already imports it (directly or not). Each was a circle once, or nearly.
PLANTS = {
    # The operators' old `from popxl import ops` in a method of Tensor.
    "runtime": [("popxl.tensor", "popxl.ops")],
    "addons": [
        # graph.py once imported autodiff in a method.
        ("popxl_addons.core.modules.graph", "popxl_addons.core.transforms.autodiff"),
        # linear.py imports init.py.
        ("popxl_addons.layers.init", "popxl_addons.layers.linear"),
        # strided.py imports all_reduce_tp.py.
        ("popxl_addons.collectives.all_reduce_tp", "popxl_addons.collectives.strided"),
    ],
    # plan_cli.py once took helpers from cli.py, which dispatches to it.
    "harness": [("popxl_addons.harness.plan_cli", "popxl_addons.harness.cli")],
}


@pytest.mark.parametrize("src", SOURCES, ids=lambda src: src.parent.name)
def test_no_import_circle_among_a_packages_modules(src: Path, tmp_path: Path) -> None:
    assert import_circles(src) == []
    for module, imported in PLANTS[src.parent.name]:
        planted = plant_import(src, tmp_path / module, module, imported)
        assert any({module, imported} <= set(circle) for circle in import_circles(planted)), (module, imported)


def test_imports_count_at_every_level_but_under_type_checking() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import a.b.c\n"
        "try:\n    from d import e\nexcept ImportError:\n    pass\n"
        "if TYPE_CHECKING:\n    from f import g\nelse:\n    import h\n"
        "def k():\n    import m\n"
        "class N:\n    def o(self):\n        from . import p\n        from ..q import r\n"
    )
    assert imported_modules(source, "pkg.sub.mod") == {
        *("typing", "typing.TYPE_CHECKING", "a", "a.b", "a.b.c", "d", "d.e", "h", "m"),
        *("pkg", "pkg.sub", "pkg.sub.p", "pkg.q", "pkg.q.r"),
    }
    package = imported_modules("from . import x\nfrom .y import z\n", "pkg", is_package=True)
    assert package == {"pkg", "pkg.x", "pkg.y", "pkg.y.z"}


def test_importing_a_module_imports_its_packages_but_its_own_are_no_circle(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("import other\n")
    (tmp_path / "pkg" / "a.py").write_text("import pkg\n")
    (tmp_path / "other.py").write_text("")
    assert import_graph(tmp_path) == {"pkg": {"other"}, "pkg.a": set(), "other": set()}
    assert import_circles(tmp_path) == []
    # As popdist once joined through popxl.distributed while popxl.Ir called popdist.
    (tmp_path / "other.py").write_text("def join():\n    from pkg.a import x\n")
    assert import_circles(tmp_path) == [["other", "pkg"]]
