"""No import circle among the runtime's modules (popxl, popdist, popart), imports inside functions included;
what `popxl.tensor` declares is set on it from above."""

from __future__ import annotations

import ast
from pathlib import Path

import popxl
import popxl.tensor
from popxl.import_circles import import_circles, import_graph, imported_modules, plant_import
from popxl.ops._tensor_methods import METHODS

SRC = Path(__file__).parents[1] / "src"


def test_no_import_circle_among_the_runtime_modules(tmp_path: Path) -> None:
    assert import_circles(SRC) == []
    # The check can fail: the operators' old `from popxl import ops` in a method of Tensor is found.
    planted = plant_import(SRC, tmp_path, "popxl.tensor", "popxl.ops")
    assert any({"popxl.tensor", "popxl.ops"} <= set(circle) for circle in import_circles(planted))


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


def test_tensor_declares_what_is_set_on_it_from_above() -> None:
    tree = ast.parse(Path(popxl.tensor.__file__).read_text())
    tensor = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tensor")
    declared = {f.name for n in tensor.body if isinstance(n, ast.If) for f in n.body if isinstance(f, ast.FunctionDef)}
    assert declared == set(METHODS)
    assert all(getattr(popxl.Tensor, name) is method for name, method in METHODS.items())
    # popxl's tensor-creating functions, declared as re-exports under `if TYPE_CHECKING:`.
    creators = {
        a.name
        for n in tree.body
        if isinstance(n, ast.If)
        for i in n.body
        if isinstance(i, ast.ImportFrom)
        for a in i.names
        if a.asname == a.name
    }
    assert "variable" in creators and "graph_input" in creators
    assert all(getattr(popxl.tensor, name) is getattr(popxl, name) for name in creators)
