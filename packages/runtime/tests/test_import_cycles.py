"""No import circle among the runtime's module-level imports (imports inside functions are lazy by design)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import popxl

SRC = Path(popxl.__file__).parents[1]


def _module_level_imports(path: Path) -> set[str]:
    """The modules `path` imports when it is imported: top-level statements, not under `if TYPE_CHECKING:`."""
    found: set[str] = set()
    todo = list(ast.parse(path.read_text()).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
        elif isinstance(node, ast.If | ast.Try):
            todo.extend([*node.body, *node.orelse, *getattr(node, "handlers", []), *getattr(node, "finalbody", [])])
        elif isinstance(node, ast.ExceptHandler):
            todo.extend(node.body)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _graph(package: str) -> dict[str, set[str]]:
    """Each module of `package` -> the modules of `package` it imports at module level (parents excluded:
    importing a module imports its parent packages first, which is not a circle)."""
    paths = {}
    for p in (SRC / package).rglob("*.py"):
        parts = list(p.relative_to(SRC).with_suffix("").parts)
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return {
        name: {d for d in _module_level_imports(p) if d in paths and d != name and not name.startswith(f"{d}.")}
        for name, p in paths.items()
    }


def test_only_module_level_imports_count(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import popxl.ir\n"
        "try:\n    from popxl.graph import Graph\nexcept ImportError:\n    pass\n"
        "if TYPE_CHECKING:\n    from popxl.op import Op\n"
        "def f():\n    import popxl.session\n"
    )
    assert _module_level_imports(source) == {
        "typing",
        "typing.TYPE_CHECKING",
        "popxl.ir",
        "popxl.graph",
        "popxl.graph.Graph",
    }


def test_runtime_modules_import_without_a_circle() -> None:
    for package in ("popxl", "popdist", "popart"):
        graph = _graph(package)
        assert len(graph) > 1 or package == "popart"
        graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming the circle
    assert "popxl.tensor" in _graph("popxl")["popxl.graph"]
