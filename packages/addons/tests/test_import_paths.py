"""popxl-addons' module paths import as its programs spell them, offer the names the table in
`popxl_addons._paths` gives them (each the object its source defines), raise a useful error for the
names this project lacks, and name the distribution to install for the paths another one ships."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest

import popxl_addons
import popxl_addons as addons
import popxl_addons.core
from popxl_addons import _distributions
from popxl_addons._not_implemented import NotImplementedHereError
from popxl_addons._paths import (
    BY_MODULE,
    PATHS,
    SUBPACKAGES,
    From,
    ModulePath,
    distribution,
    missing_names,
    package_of,
    shipped_apart,
)

REPO = Path(__file__).resolve().parents[3]


def _installed(module: str) -> bool:
    """Whether the distribution that ships `module` (a path of the table, or a module of a sub-package) is installed."""
    known = module in BY_MODULE or module in SUBPACKAGES
    package = package_of(module) if known else next(p for s, p in SUBPACKAGES.items() if module.startswith(f"{s}."))
    root = next(sub for sub, owner in SUBPACKAGES.items() if owner == package)
    try:
        return importlib.util.find_spec(root) is not None
    except ModuleNotFoundError:  # the finder naming the distribution to install
        return False


def _needs(source: From, name: str) -> str:
    """The module whose distribution `from source import name` needs: the sub-module, where `name` is one."""
    sub = f"{source.source}.{name}"
    return sub if sub in BY_MODULE or sub in SUBPACKAGES else source.source


def _value(source: From, name: str) -> object:
    """`name` as its source offers it (`from source import name`)."""
    module = importlib.import_module(source.source)
    return vars(module)[name] if name in vars(module) else importlib.import_module(f"{source.source}.{name}")


@pytest.mark.parametrize("path", PATHS, ids=[p.module for p in PATHS])
def test_every_path_imports_with_the_names_of_the_table(path: ModulePath) -> None:
    if not _installed(path.module):
        with pytest.raises(ModuleNotFoundError, match=f"popxl-addons-{path.package}"):
            importlib.import_module(path.module)
        return
    module = importlib.import_module(path.module)
    assert module.__name__ == path.module
    for source in path.sources:
        for name in [n for n in source.names if _installed(_needs(source, n))]:
            assert getattr(module, name) is _value(source, name), f"{path.module}.{name}"
            assert (name in getattr(module, "__all__", [name])) == source.listed, f"{path.module}.{name}"


def test_each_name_comes_from_the_module_the_table_says() -> None:
    """A name the table takes from one of this project's modules (not a popxl-addons path) is defined
    there or in a module of that package: the table's source column is the true one."""
    for path in PATHS:
        for source in path.sources:
            if source.source in BY_MODULE or not _installed(source.source):
                continue
            for name in source.names:
                value = _value(source, name)
                if isinstance(value, type | types.FunctionType):  # what carries the module defining it
                    defined_in = value.__module__
                    assert defined_in == source.source or defined_in.startswith(f"{source.source}."), (
                        f"{path.module}.{name} comes from {defined_in}, not {source.source}"
                    )


def test_top_level_names_are_cores() -> None:
    core = popxl_addons.core
    for name in ["Module", "NamedTensors", "GraphWithNamedArgs", "BoundGraph", "VariableFactory", "TaskSession"]:
        assert getattr(addons, name) is getattr(core, name)
    assert addons.autodiff_with_accumulation is core.autodiff_with_accumulation
    assert addons.batch_serialise is core.batch_serialise
    assert addons.seed_variable is core.seed_variable  # the function, as in popxl-addons, not the module
    assert addons.transforms.autodiff is core.autodiff
    assert addons.transforms.batch_serialisation.RemoteHandle is core.RemoteHandle
    assert addons.ops.host_load is core.host_load
    assert addons.ops.cross_entropy is core.cross_entropy  # the function, bound over its sub-module
    assert addons.named_tensors.NamedTensorData is core.NamedTensorData
    assert addons.optimizers.adam.AdamOptimizerStep is core.AdamOptimizerStep
    assert addons.patterns.apply_pre_alias_patterns is core.apply_pre_alias_patterns
    assert addons.GIT_COMMIT is None
    star: dict[str, object] = {}
    exec("from popxl_addons import *", star)
    assert star["Module"] is core.Module and star["transforms"] is addons.transforms
    assert sorted(n for n in star if n != "__builtins__") == sorted(addons.__all__)


@pytest.mark.parametrize(("module", "name", "instead"), missing_names())
def test_a_missing_name_raises_not_implemented(module: str, name: str, instead: str) -> None:
    path = importlib.import_module(module)
    with pytest.raises(NotImplementedHereError) as raised:
        getattr(path, name)
    assert isinstance(raised.value, NotImplementedError) and isinstance(raised.value, ImportError)
    assert str(raised.value).startswith(f"{module}.{name} is a popxl-addons name that this project does not implement")
    assert not instead or str(raised.value).endswith(f"; instead use {instead}")
    with pytest.raises(NotImplementedHereError, match=rf"{module}\.{name}"):
        exec(f"from {module} import {name}", {})
    assert name not in getattr(path, "__all__", []) and name not in BY_MODULE[module].names
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        path.not_a_name  # noqa: B018


def _defined_at_top_level(file: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(file.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_a_missing_name_is_defined_nowhere_in_the_project() -> None:
    """What the table lists as missing is truly missing: no module of any package defines it."""
    missing = {name for _, name, _ in missing_names()}
    defined = {
        (file.relative_to(REPO).as_posix(), name)
        for file in REPO.glob("packages/*/src/**/*.py")
        for name in _defined_at_top_level(file) & missing
    }
    assert defined == set()


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        addons.not_a_name  # noqa: B018
    assert not hasattr(addons.ops, "not_a_name")


# The paths and sub-packages shipped apart from their parent package: what a missing distribution takes away.
_APART = [module for module in [*BY_MODULE, *SUBPACKAGES] if shipped_apart(module)]


def test_missing_distribution_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """With only popxl-addons installed, the paths the harness ships say which distribution to install."""
    core_dir = str(Path(popxl_addons.__file__).parent)
    # As if the harness' folder were absent.
    monkeypatch.setattr(popxl_addons, "__path__", [core_dir])
    monkeypatch.setattr(popxl_addons.ops, "__path__", [str(Path(core_dir, "ops"))])
    for name in [n for n in sys.modules if n.startswith(tuple(_APART))]:
        monkeypatch.delitem(sys.modules, name)
    # (vars, not hasattr: asking for a missing distribution's package raises the error under test.)
    for module in _APART:
        package, _, attr = module.rpartition(".")
        if attr in vars(sys.modules[package]):
            monkeypatch.delattr(sys.modules[package], attr)
    for module in _APART:
        with pytest.raises(ModuleNotFoundError, match=f"pip install {distribution(module)}"):
            importlib.import_module(module)
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'popxl_addons\.nothing'"):
        importlib.import_module("popxl_addons.nothing")  # other missing paths keep Python's message
    assert addons.Module is popxl_addons.core.Module  # the rest is unaffected


def test_finder_is_last_and_installed_once() -> None:
    finders = [f for f in sys.meta_path if isinstance(f, _distributions.MissingDistributionFinder)]
    assert len(finders) == 1
    _distributions.install_finder()
    assert [f for f in sys.meta_path if isinstance(f, _distributions.MissingDistributionFinder)] == finders
