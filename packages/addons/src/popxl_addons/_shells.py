"""Writes popxl-addons' re-export modules ("shells") and the README's list of missing names from
the table in `popxl_addons._paths`.

`python -m popxl_addons._shells` (from the repository's root) rewrites them; a test checks that the
committed files are what `generated()` gives, so an edit to a shell or to the table alone fails.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

from popxl_addons._paths import (
    FOLDERS,
    PATHS,
    ROOT,
    ModulePath,
    is_package,
    missing_names,
    shipped_apart,
    spans_distributions,
)

HEADER = "# Generated from the table in popxl_addons/_paths.py by `python -m popxl_addons._shells`; do not edit."
README = "packages/addons/README.md"
README_START = "<!-- the names popxl_addons/_paths.py lists as missing, written by `python -m popxl_addons._shells` -->"
README_END = "<!-- end of the names written by popxl_addons._shells -->"
WIDTH = 120


def shell_file(path: ModulePath) -> str:
    """Where `path`'s file lies, relative to the repository's root."""
    name, folder = path.module.replace(".", "/"), FOLDERS[path.package]
    return f"packages/{folder}/src/{name}/__init__.py" if is_package(path.module) else f"packages/{folder}/src/{name}.py"


def _kind(name: str) -> int:
    # isort's "order by type", as ruff applies it: constants, then classes, then the rest.
    if len(name) > 1 and name.isupper():
        return 0
    return 1 if name[:1].isupper() else 2


def _from_import(module: str, names: Iterable[str], indent: str = "") -> list[str]:
    ordered = sorted(names, key=lambda n: (_kind(n), n.lower()))
    return _bracketed(f"{indent}from {module} import ", ordered, "(", ")", indent, bare=True)


def _bracketed(head: str, items: list[str], open_: str, close: str, indent: str = "", bare: bool = False) -> list[str]:
    # One line where it fits (without the brackets where `bare`), else one item a line with a trailing
    # comma: what ruff format writes.
    line = f"{head}{'' if bare else open_}{', '.join(items)}{'' if bare else close}"
    if len(line) <= WIDTH:
        return [line]
    return [f"{head}{open_}", *[f"{indent}    {item}," for item in items], f"{indent}{close}"]


# The imports of a shell: by module, the names in its `__all__` and those re-exported outside it.
_Imports = dict[str, tuple[set[str], set[str]]]


def _add(imports: _Imports, module: str, names: Iterable[str], listed: bool = True) -> None:
    plain, aliased = imports.setdefault(module, (set(), set()))
    (plain if listed else aliased).update(names)


def _imports(imports: _Imports, indent: str = "") -> list[str]:
    # Each module's plain names in one statement, each name it re-exports unlisted as `name as name`.
    lines: list[str] = []
    for module in sorted(imports, key=str.lower):
        plain, aliased = imports[module]
        if plain:
            lines += _from_import(module, plain, indent)
        lines += [f"{indent}from {module} import {name} as {name}" for name in sorted(aliased, key=str.lower)]
    return lines


def _docstring(path: ModulePath) -> list[str]:
    own = (path.module, f"{path.module}.")
    outside = [f"`{m}`" for m in sorted({s.source for s in path.sources}) if not m.startswith(own)]
    text = f"popxl-addons' `{path.module}`"
    if path.doc:
        text += f": {path.doc}."
    elif outside:
        sources = outside[0] if len(outside) == 1 else f"{', '.join(outside[:-1])} and {outside[-1]}"
        text += f", re-exporting the names of {sources}."
    else:
        text += ", re-exporting its sub-modules' names."
    if path.missing:
        names = ", ".join(f"`{name}`" for name in path.missing)
        text += f" Not implemented here: {names} (they raise `NotImplementedHereError`)."
    return textwrap.wrap(f'"""{text}"""', WIDTH, break_on_hyphens=False, break_long_words=False)


def _dict(name: str, entries: dict[str, str]) -> list[str]:
    return _bracketed(f"{name} = ", [f'"{key}": "{value}"' for key, value in entries.items()], "{", "}")


def render(path: ModulePath) -> str:
    """The text of `path`'s shell."""
    eager: _Imports = {}
    # What mypy is told of the names imported on first use. A sub-package of another distribution is
    # left out: the package's own check runs without it, and a program that imports it has its types.
    type_only: _Imports = {}
    for source in path.sources:
        if not (source.lazy and source.source == path.module):
            _add(type_only if source.lazy else eager, source.source, source.names, source.listed)
    lazy = {name: source.source for source in path.sources if source.lazy for name in source.names}
    if lazy:
        _add(eager, "popxl_addons._lazy", ["on_first_use"])
    if path.missing:
        _add(eager, "popxl_addons._not_implemented", ["not_implemented"])
    if path.module == ROOT:
        _add(eager, ROOT, ["_distributions"])
    spans = spans_distributions(path.module)
    stdlib: list[str] = []
    if spans:
        stdlib.append("from pkgutil import extend_path")
    if type_only:
        stdlib.append("from typing import TYPE_CHECKING")
    listed = [name for source in path.sources if source.listed for name in source.names]

    lines = [HEADER, *_docstring(path)]
    if stdlib:
        lines += ["", *stdlib]
    if spans:
        lines += ["", "# Every distribution's folder of this package (an editable install keeps them apart), before"]
        lines += ["# the imports: a sub-package's `extend_path` searches this `__path__`."]
        lines += ["__path__ = extend_path(__path__, __name__)"]
    lines += ["", *_imports(eager)]
    if type_only:
        lines += ["", "if TYPE_CHECKING:", *_imports(type_only, "    ")]
    if path.module == ROOT:
        lines += ["", "_distributions.install_finder()", ""]
        lines += ["# The commit of popxl-addons' own git checkout there; this project is not popxl-addons' repository."]
        lines += ["GIT_COMMIT: str | None = None"]
        listed.append("GIT_COMMIT")
    lines += ["", *_bracketed("__all__ = ", [f'"{name}"' for name in listed], "[", "]")]
    if lazy:
        lines += ["", *_dict("_ON_FIRST_USE", lazy), "__getattr__ = on_first_use(__name__, _ON_FIRST_USE)"]
    if path.missing:
        lines += ["", *_dict("_MISSING", dict(path.missing)), "__getattr__ = not_implemented(__name__, _MISSING)"]
    return "\n".join(lines) + "\n"


def readme_section() -> str:
    """The README's list of the popxl-addons names this project lacks, between its markers."""
    rows = [
        f"- `{module}.{name}`" + (f": instead, {instead}" if instead else "")
        for module, name, instead in missing_names()
    ]
    return "\n".join([README_START, *rows, README_END])


def generated() -> dict[str, str]:
    """Every shell's text, by its file relative to the repository's root; with the empty `py.typed` that
    marks a package shipped apart from its parent package as typed (mypy checks installed packages only so)."""
    files = {shell_file(path): render(path) for path in PATHS if path.shell}
    for path in PATHS:
        if path.shell and is_package(path.module) and shipped_apart(path.module):
            files[shell_file(path).replace("__init__.py", "py.typed")] = ""
    return files


def with_readme_section(readme: str) -> str:
    """`readme` with its generated section replaced by `readme_section()`."""
    pattern = re.compile(re.escape(README_START) + ".*?" + re.escape(README_END), re.DOTALL)
    if not pattern.search(readme):
        raise ValueError(f"{README} has no section between {README_START!r} and {README_END!r}")
    return pattern.sub(lambda _: readme_section(), readme)


def write(root: Path) -> None:
    """Rewrite every shell and the README's section under `root`, the repository's root."""
    for file, text in generated().items():
        target = root / file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    readme = root / README
    readme.write_text(with_readme_section(readme.read_text()))


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd())
