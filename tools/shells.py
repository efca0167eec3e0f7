"""Writes popxl-addons' re-export modules ("shells"), `popxl_addons/core/__init__.py` among them, and the README's
list of missing names from the path table in `popxl_addons._paths`.

`python -m tools.shells` (from the repository's root) rewrites them; tools/tests/test_shells.py checks that the
committed files are what `generated()` gives, so an edit to a shell alone, or to the table or a module's `__all__`
without regenerating, fails.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

from popxl_addons._paths import PATHS, ROOT, ModulePath, missing_names

HEADER = "# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit."
SRC = "packages/addons/src"
README = "packages/addons/README.md"
README_START = "<!-- the names popxl_addons/_paths.py lists as missing, written by `python -m tools.shells` -->"
README_END = "<!-- end of the names written by tools.shells -->"
WIDTH = 120


def _is_package(module: str) -> bool:
    # A package has sub-modules: another path, or a module a path takes names from.
    known = {path.module for path in PATHS} | {source.source for path in PATHS for source in path.sources}
    return any(other.startswith(f"{module}.") for other in known)


def shell_file(path: ModulePath) -> str:
    """Where `path`'s file lies, relative to the repository's root."""
    name = path.module.replace(".", "/")
    return f"{SRC}/{name}/__init__.py" if _is_package(path.module) else f"{SRC}/{name}.py"


def _kind(name: str) -> int:
    # isort's "order by type", as ruff applies it: constants, then classes, then the rest.
    if len(name) > 1 and name.isupper():
        return 0
    return 1 if name[:1].isupper() else 2


def _bracketed(head: str, items: list[str], open_: str, close: str, bare: bool = False) -> list[str]:
    # One line where it fits (without the brackets where `bare`), else one item a line with a trailing
    # comma: what ruff format writes.
    line = f"{head}{'' if bare else open_}{', '.join(items)}{'' if bare else close}"
    if len(line) <= WIDTH:
        return [line]
    return [f"{head}{open_}", *[f"    {item}," for item in items], close]


def _imports(path: ModulePath) -> list[str]:
    # One `from module import ...` a module, in ruff's (isort's) order.
    imports: dict[str, list[str]] = {}
    if path.submodules:
        imports[path.module] = list(path.submodules)
    for source in path.sources:
        imports.setdefault(source.source, []).extend(source.names())
    if path.missing:
        imports["popxl_addons._not_implemented"] = ["not_implemented"]
    lines = []
    for module in sorted(imports, key=str.lower):
        ordered = sorted(imports[module], key=lambda n: (_kind(n), n.lower()))
        lines += _bracketed(f"from {module} import ", ordered, "(", ")", bare=True)
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


def _dict(name: str, entries: Iterable[tuple[str, str]]) -> list[str]:
    return _bracketed(f"{name} = ", [f'"{key}": "{value}"' for key, value in entries], "{", "}")


def _first_use(path: ModulePath) -> list[str]:
    # A module-level `__getattr__` that imports the sub-packages of `first_use` when first asked for.
    listed = ", ".join(f"`{name}`" for name in path.first_use)
    quoted = ", ".join(f'"{name}"' for name in path.first_use)
    return [
        "",
        "",
        "def __getattr__(name: str) -> object:",
        f'    """The sub-packages not imported with the package ({listed}), on first use."""',
        f"    if name in ({quoted}):",
        '        return importlib.import_module(f"{__name__}.{name}")',
        '    raise AttributeError(f"module {__name__!r} has no attribute {name!r}", name=name)',
    ]


def render(path: ModulePath) -> str:
    """The text of `path`'s shell."""
    names = path.names()
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"{path.module} takes {', '.join(repeated)} from more than one module")
    lines = [HEADER, *_docstring(path), ""]
    stdlib = ["import importlib"] if path.first_use else []
    if path.module == ROOT:
        stdlib.append("from pkgutil import extend_path")
    if stdlib:
        lines += [*stdlib, ""]
    lines += _imports(path)
    if path.module == ROOT:
        # The harness, a distribution of its own, ships `popxl_addons/harness/` in another folder.
        lines += ["", "# Every installed folder of this package: an editable install keeps the harness's apart."]
        lines += ["__path__ = extend_path(__path__, __name__)", ""]
        lines += ["# The commit of popxl-addons' own git checkout there; this project is not popxl-addons' repository."]
        lines += ["GIT_COMMIT: str | None = None"]
        names.append("GIT_COMMIT")
    lines += ["", *_bracketed("__all__ = ", [f'"{name}"' for name in names], "[", "]")]
    if path.first_use:
        lines += _first_use(path)
    if path.missing:
        lines += ["", *_dict("_MISSING", path.missing.items()), "__getattr__ = not_implemented(__name__, _MISSING)"]
    return "\n".join(lines) + "\n"


def readme_section() -> str:
    """The README's list of the popxl-addons names this project lacks, between its markers."""
    rows = [
        f"- `{module}.{name}`" + (f": instead, {instead}" if instead else "")
        for module, name, instead in missing_names()
    ]
    return "\n".join([README_START, *rows, README_END])


def generated() -> dict[str, str]:
    """Every shell's text, by its file relative to the repository's root."""
    return {shell_file(path): render(path) for path in PATHS if path.shell}


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
