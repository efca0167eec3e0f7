"""The product code keeps to its size rule and uses no other module's private names (tools/layout.py), and the
checks themselves find a long module, a long function and a private reach planted in a small tree."""

from __future__ import annotations

from pathlib import Path

from tools.layout import MAX_FUNCTION_LINES, MAX_MODULE_LINES, long_functions, long_modules, modules, private_reaches

ROOT = Path(__file__).resolve().parents[2]


def test_every_long_module_and_function_says_why() -> None:
    found = modules(ROOT)
    assert len(found) > 100  # the product's modules were found
    assert [(path, size) for path, size, why in long_modules(found) if not why] == []
    assert [(path, name, size) for path, name, size, why in long_functions(found) if not why] == []


def test_no_module_reaches_into_anothers_private_names() -> None:
    found = modules(ROOT)
    names = {m.name for m in found}
    assert {m.path: r for m in found if not m.generated and (r := private_reaches(m, names))} == {}


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        file = root / "packages" / "p" / "src" / name
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)
    return root


def test_planted_long_module_and_function_are_found_unless_they_say_why(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    long_function = f"def f() -> None:\n{body}"
    filler = "\n" * MAX_MODULE_LINES
    root = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/plain.py": long_function + filler,
            "pkg/reasoned.py": "# This module is long because a test says so.\n"
            + long_function.replace(":\n", ":\n    # This function is long because a test says so.\n", 1)
            + filler,
        },
    )
    found = modules(root)
    assert {(p.rpartition("/")[2], why) for p, _, why in long_modules(found)} == {
        ("plain.py", False),
        ("reasoned.py", True),
    }
    functions = {(p.rpartition("/")[2], name, why) for p, name, _, why in long_functions(found)}
    assert functions == {("plain.py", "f", False), ("reasoned.py", "f", True)}


def test_planted_private_reaches_are_found(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/_inner.py": "def _helper() -> None: ...\n",
            "pkg/a.py": "class A:\n    def __init__(self) -> None:\n        self._own = 1\n\n"
            "    def same(self, other: 'A') -> int:\n        return other._own + super()._x + self._y\n",
            "pkg/b.py": "from pkg import _inner\nfrom pkg._inner import _helper\nimport pkg.a\n\n"
            "def g(a: pkg.a.A) -> int:\n    return a._own + a._asdict()\n",
            "other/c.py": "from pkg import _inner\n",
        },
    )
    found = modules(root)
    names = {m.name for m in found}
    reaches = {m.name: private_reaches(m, names) for m in found}
    # A private sub-module imported in its own package, a class's own privates on another instance, self,
    # super() and the named-tuple API are not reaches; a private function imported, another class's private
    # attribute and a package's private sub-module imported from outside it are.
    assert reaches["pkg.a"] == []
    assert sorted(reaches["pkg.b"]) == ["a._own", "pkg._inner._helper"]
    assert reaches["other.c"] == ["pkg._inner"]
