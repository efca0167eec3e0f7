"""Figures of the product code's layout, and its size rule: what `python -m tools.layout` prints and
`tools/tests/test_layout.py` holds.

The product code is every module under `packages/*/src`. The rule: no module over `MAX_MODULE_LINES` lines and
no function over `MAX_FUNCTION_LINES`, unless a comment near its top says why ("... is long because ...").
A private reach is `x._name` where `x` is not `self`, `cls` or `super()`, or `from m import _name`, naming a
private attribute the module does not define itself: one module using another's private names. A package's
private sub-module imported inside that package, and the public API of named tuples (`_fields`, `_replace`, ...),
are not reaches.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80
LONG_BECAUSE = "long because"
# How far below a function's first line its reason may stand; a module's stands before its first definition.
REASON_WITHIN = 15
GENERATED = "# Generated from"
NAMED_TUPLE_API = {"_fields", "_field_defaults", "_replace", "_asdict", "_make"}


@dataclass(frozen=True)
class Module:
    """One product module: its path relative to the root, its lines, and its syntax tree."""

    path: str
    name: str
    lines: list[str]
    tree: ast.Module

    @property
    def generated(self) -> bool:
        """Whether a generator wrote it (its first line says so)."""
        return bool(self.lines) and self.lines[0].startswith(GENERATED)


def modules(root: Path) -> list[Module]:
    """Every product module under `root`'s `packages/*/src`, in path order."""
    found = []
    for file in sorted(root.glob("packages/*/src/**/*.py")):
        text, parts = file.read_text(), file.relative_to(root).parts
        name = ".".join(parts[3:]).removesuffix(".py").removesuffix(".__init__")
        found.append(Module(str(file.relative_to(root)), name, text.splitlines(), ast.parse(text)))
    return found


def _says_why(lines: list[str], first: int, last: int) -> bool:
    return any(LONG_BECAUSE in line for line in lines[first:last])


def _header_end(module: Module) -> int:
    definitions = [n.lineno for n in module.tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
    return min(definitions, default=len(module.lines))


def long_modules(found: list[Module]) -> list[tuple[str, int, bool]]:
    """(path, lines, says why) of each module over `MAX_MODULE_LINES`."""
    return [
        (m.path, len(m.lines), _says_why(m.lines, 0, _header_end(m))) for m in found if len(m.lines) > MAX_MODULE_LINES
    ]


def long_functions(found: list[Module]) -> list[tuple[str, str, int, bool]]:
    """(path, function, lines, says why) of each function over `MAX_FUNCTION_LINES`."""
    long = []
    for m in found:
        for node in ast.walk(m.tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    first = node.lineno - 1
                    long.append((m.path, node.name, size, _says_why(m.lines, first, first + REASON_WITHIN)))
    return long


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_self(base: ast.expr) -> bool:
    # `self`, `cls` or `super()`: the class's own attributes.
    if isinstance(base, ast.Name):
        return base.id in ("self", "cls")
    return isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super"


def _own_names(tree: ast.Module) -> set[str]:
    # Names the module defines: functions, classes, assignments (its own and its instances' attributes).
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_self(node.value):
            own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            own.add(node.target.id)
    return own


def private_reaches(module: Module, names: set[str]) -> list[str]:
    """Each private name `module` uses of another module, as `base._name` or `from m import _name`; `names` are
    every product module's dotted name."""
    own = _own_names(module.tree) | NAMED_TUPLE_API
    package = module.name if module.path.endswith("__init__.py") else module.name.rpartition(".")[0]
    reaches = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            inside = node.module == package or node.module.startswith(f"{package}.")
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}" in names
                if _is_private(alias.name) and not (submodule and inside):
                    reaches.append(f"{node.module}.{alias.name}")
        elif (
            isinstance(node, ast.Attribute)
            and _is_private(node.attr)
            and node.attr not in own
            and not _is_self(node.value)
        ):
            reaches.append(f"{ast.unparse(node.value)}.{node.attr}")
    return reaches


def report(root: Path) -> str:
    """The figures, as text."""
    found = modules(root)
    written = [m for m in found if not m.generated]
    out = [
        f"product modules: {len(found)} ({len(found) - len(written)} generated), "
        f"lines: {sum(len(m.lines) for m in found)} ({sum(len(m.lines) for m in written)} hand-written)",
        "largest modules:",
    ]
    out += [f"  {len(m.lines):5d} {m.path}" for m in sorted(found, key=lambda m: -len(m.lines))[:10]]
    out.append(f"modules over {MAX_MODULE_LINES} lines:")
    out += [f"  {n:5d} {p}{'' if why else '  (no reason given)'}" for p, n, why in long_modules(found)]
    out.append(f"functions over {MAX_FUNCTION_LINES} lines:")
    out += [f"  {n:5d} {p}:{f}{'' if why else '  (no reason given)'}" for p, f, n, why in long_functions(found)]
    names = {m.name for m in found}
    reaches = {m.path: private_reaches(m, names) for m in written}
    out.append(
        f"private reaches across modules: {sum(map(len, reaches.values()))} in {sum(map(bool, reaches.values()))}"
    )
    out += [f"  {len(r):4d} {p}" for p, r in sorted(reaches.items(), key=lambda kv: -len(kv[1]))[:15] if r]
    return "\n".join(out)


if __name__ == "__main__":
    print(report(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()))
