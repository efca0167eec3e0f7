"""Import circles among the modules of one source folder, for the circle test of every package's sources
(tools/tests/test_import_circles.py).

Every import statement counts, wherever it is (module level, in a function, in a `try:`), except those
under `if TYPE_CHECKING:`, which never run: an import deferred into a function still ties the two
modules together, only later. Importing `a.b.c` runs `a` and `a.b` first, so it counts as importing
them too; but a module importing one of its own parent packages is no circle, since Python has always
started that package before the module.

Only import statements count: a module named in a string (`importlib.import_module`) is not seen.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

__all__ = ["import_circles", "import_graph", "imported_modules", "plant_import"]


def imported_modules(source: str, module: str = "", is_package: bool = False) -> set[str]:
    """The modules (and the names, which may be modules) that `source` imports, except under `if TYPE_CHECKING:`.

    `module` and `is_package` name the importing module, to resolve its relative imports.
    """
    found: set[str] = set()
    for node in _nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.update(_with_parents(alias.name))
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, module, is_package)
            found.update(_with_parents(base))
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def import_graph(src: Path) -> dict[str, set[str]]:
    """Each module under `src` (a folder of top-level packages and modules) -> the modules under `src` it imports."""
    packages = {}
    for path in src.rglob("*.py"):
        parts = path.relative_to(src).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        packages[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    graph = {}
    for name, (path, is_package) in packages.items():
        imported = imported_modules(path.read_text(), name, is_package)
        graph[name] = {m for m in imported if m in packages and m != name and not name.startswith(f"{m}.")}
    return graph


def import_circles(src: Path) -> list[list[str]]:
    """The import circles among the modules under `src`: each set of modules that import one another in a
    circle (a strongly connected component of more than one module), sorted."""
    graph = import_graph(src)
    reach = {name: _reachable(graph, name) for name in graph}
    circles = {
        frozenset({name} | {m for m in reach[name] if name in reach[m]}) for name in graph if name in reach[name]
    }
    return sorted(sorted(circle) for circle in circles)


def plant_import(src: Path, dest: Path, module: str, imported: str) -> Path:
    """A copy of the `.py` files under `src` in `dest`, where a function in `module` imports `imported`."""
    for path in src.rglob("*.py"):
        copy = dest / path.relative_to(src)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text())
    path = dest.joinpath(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    path.write_text(f"{path.read_text()}\n\ndef _planted() -> None:\n    import {imported}\n")
    return dest


def _nodes(tree: ast.AST) -> Iterator[ast.AST]:
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    # `from . import x` in a package's __init__ is relative to that package, elsewhere to the module's package.
    parts = module.split(".") if is_package else module.split(".")[:-1]
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _with_parents(name: str) -> list[str]:
    """`a.b.c` and the packages that importing it runs first: a, a.b, a.b.c."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph[name])
    return seen
