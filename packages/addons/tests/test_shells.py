"""popxl-addons' re-export modules and the README's list of missing names are what the table in
`popxl_addons._paths` generates now: a shell edited by hand, or a table edited alone, fails here."""

from __future__ import annotations

from pathlib import Path

from popxl_addons._paths import PATHS, SUBPACKAGES
from popxl_addons._shells import README, generated, readme_section, with_readme_section

REPO = Path(__file__).resolve().parents[3]
REGENERATE = "regenerate them: python -m popxl_addons._shells (from the repository's root)"


def test_the_committed_shells_are_current() -> None:
    stale = [
        file for file, text in generated().items() if not (REPO / file).is_file() or (REPO / file).read_text() != text
    ]
    assert stale == [], REGENERATE


def test_every_module_outside_the_sub_packages_is_generated() -> None:
    """No hand-written re-export module beside the generated ones; the root's `_` modules are the machinery."""
    owned = tuple(name.replace(".", "/") + "/" for name in SUBPACKAGES)
    files = set()
    for src in REPO.glob("packages/*/src"):
        for file in src.glob("popxl_addons/**/*.py"):
            module = file.relative_to(src)
            machinery = (
                module.parent == Path("popxl_addons") and module.name.startswith("_") and module.name != "__init__.py"
            )
            if not machinery and not module.as_posix().startswith(owned):
                files.add(file.relative_to(REPO).as_posix())
    assert sorted(files - set(generated())) == []


def test_the_readme_lists_what_the_table_lacks() -> None:
    readme = (REPO / README).read_text()
    assert readme_section() in readme and with_readme_section(readme) == readme, REGENERATE
    for path in PATHS:
        for name in path.missing:
            assert f"`{path.module}.{name}`" in readme
