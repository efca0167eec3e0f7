"""No import circle among popxl_addons.core's modules, lazy (function-level) imports included."""

from __future__ import annotations

import ast
from pathlib import Path

import popxl_addons.core

CORE = Path(popxl_addons.core.__file__).parent
SRC = CORE.parents[1]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(source: str, known: set[str]) -> set[str]:
    """The modules of `known` that `source` imports anywhere, except under `if TYPE_CHECKING:`."""
    tree = ast.parse(source)
    type_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found & known


def import_cycles(sources: dict[str, str]) -> list[list[str]]:
    """Each import circle among the modules `sources` holds (by module name), as a closed path.

    Importing a module imports its parent packages first, so an edge to a parent package is not a circle.
    """
    known = set(sources)
    edges = {
        name: sorted(d for d in _imports(src, known) if d != name and not name.startswith(f"{d}."))
        for name, src in sources.items()
    }
    state: dict[str, int] = {}
    path: list[str] = []
    cycles: list[list[str]] = []

    def visit(u: str) -> None:
        state[u] = 1
        path.append(u)
        for v in edges[u]:
            if state.get(v) == 1:
                cycles.append([*path[path.index(v) :], v])
            elif v not in state:
                visit(v)
        path.pop()
        state[u] = 2

    for name in sorted(sources):
        if name not in state:
            visit(name)
    return cycles


def _core_sources() -> dict[str, str]:
    return {_module_name(p): p.read_text() for p in CORE.rglob("*.py")}


def test_core_has_no_import_cycle() -> None:
    sources = _core_sources()
    assert "popxl_addons.core.graph" in sources and "popxl_addons.core.batch_serialisation" in sources
    assert import_cycles(sources) == []


def test_the_check_sees_lazy_circles_and_skips_type_only_imports() -> None:
    # As graph.py, autodiff.py and module.py were: top-level imports one way, imports in methods the other.
    lazy = {
        "pkg.graph": "def autodiff():\n    from pkg.autodiff import autodiff\n",
        "pkg.autodiff": "from pkg.graph import GraphWithNamedArgs\n",
        "pkg.module": "import pkg.graph\n",
    }
    assert import_cycles(lazy) == [["pkg.autodiff", "pkg.graph", "pkg.autodiff"]]
    type_only = {
        "pkg.a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
        "pkg.b": "from pkg import a\n",
        "pkg": "from pkg import a, b\n",
    }
    assert import_cycles(type_only) == []
    assert import_cycles({**type_only, "pkg.a": "from pkg.b import B\n"}) == [["pkg.a", "pkg.b", "pkg.a"]]
