"""popxl-addons' re-export modules, `core/__init__.py` among them, and the README's list of missing names are
what `tools.shells` generates from the path table now: a shell edited by hand, or a table or `__all__` edited
without regenerating, fails here."""

from __future__ import annotations

from pathlib import Path

from popxl_addons._paths import PATHS
from tools.shells import README, SRC, generated, readme_section, with_readme_section

REPO = Path(__file__).resolve().parents[2]
REGENERATE = "regenerate them: python -m tools.shells (from the repository's root)"
# This project's own code: the packages it writes by hand, the table and the error for its missing names.
HAND_WRITTEN = (
    *("popxl_addons/core/", "popxl_addons/layers/", "popxl_addons/collectives/"),
    *("popxl_addons/_paths.py", "popxl_addons/_not_implemented.py"),
)


def test_the_committed_shells_are_current() -> None:
    stale = [
        file for file, text in generated().items() if not (REPO / file).is_file() or (REPO / file).read_text() != text
    ]
    assert stale == [], REGENERATE


def test_every_other_module_is_generated() -> None:
    """Outside the hand-written packages, every module of popxl_addons is a shell, as is each package's
    `__init__.py`: no re-export module is written by hand."""
    src = REPO / SRC
    files = set()
    for file in src.glob("popxl_addons/**/*.py"):
        module = file.relative_to(src).as_posix()
        if not module.startswith(HAND_WRITTEN):
            files.add(f"{SRC}/{module}")
    packages = {f"{SRC}/popxl_addons/{p}/__init__.py" for p in ("core", "layers", "collectives")}
    assert sorted((files | packages) - set(generated())) == []


def test_the_readme_lists_what_the_table_lacks() -> None:
    readme = (REPO / README).read_text()
    assert readme_section() in readme and with_readme_section(readme) == readme, REGENERATE
    for path in PATHS:
        for name in path.missing:
            assert f"`{path.module}.{name}`" in readme
