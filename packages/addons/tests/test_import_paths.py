"""popxl-addons' module paths import as its programs spell them, offer the names the table in
`popxl_addons._paths` gives them (each the object its source defines), and raise a useful error for the
names this project lacks."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import types
from pathlib import Path

import pytest

import popxl_addons
import popxl_addons as addons
import popxl_addons.core
from popxl_addons._not_implemented import NotImplementedHereError
from popxl_addons._paths import BY_MODULE, PATHS, ROOT, From, ModulePath, missing_names

REPO = Path(__file__).resolve().parents[3]


def _value(source: str, name: str) -> object:
    """`name` as `source` offers it (`from source import name`)."""
    module = importlib.import_module(source)
    return vars(module)[name] if name in vars(module) else importlib.import_module(f"{source}.{name}")


@pytest.mark.parametrize("path", PATHS, ids=[p.module for p in PATHS])
def test_every_path_imports_with_the_names_of_the_table(path: ModulePath) -> None:
    module = importlib.import_module(path.module)
    assert module.__name__ == path.module
    for name in path.submodules:
        assert getattr(module, name) is importlib.import_module(f"{path.module}.{name}"), f"{path.module}.{name}"
    for source in path.sources:
        for name in source.names():
            assert getattr(module, name) is _value(source.source, name), f"{path.module}.{name}"
    own = ["GIT_COMMIT"] if path.module == ROOT else []
    assert module.__all__ == [*path.names(), *own]


def test_each_name_comes_from_the_module_the_table_says() -> None:
    """A name the table takes from one of this project's modules (not a popxl-addons path) is defined
    there or in a module of that package, unless popxl defines it: the table's source column is the true one."""
    for path in PATHS:
        for source in path.sources:
            if source.source in BY_MODULE and BY_MODULE[source.source].shell:
                continue
            for name in source.names():
                value = _value(source.source, name)
                # What carries the module defining it; popxl's own names are re-exported where they fit.
                if isinstance(value, type | types.FunctionType) and value.__module__.startswith("popxl_addons."):
                    defined_in = value.__module__
                    assert defined_in == source.source or defined_in.startswith(f"{source.source}."), (
                        f"{path.module}.{name} comes from {defined_in}, not {source.source}"
                    )


def test_a_subset_names_what_its_source_offers() -> None:
    with pytest.raises(ValueError, match=r"popxl_addons\.core\.utils offers no not_a_name: the table names them"):
        From("popxl_addons.core.utils", but=("not_a_name",)).names()
    assert From("popxl_addons.core.utils", only=("timer",)).names() == ["timer"]


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
    assert name not in getattr(path, "__all__", []) and name not in BY_MODULE[module].names()
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


def test_the_sub_packages_import_on_first_use() -> None:
    """As in popxl-addons, the root does not import `layers` or `collectives`; asking for them does."""
    assert addons.layers is importlib.import_module("popxl_addons.layers")
    assert addons.collectives is importlib.import_module("popxl_addons.collectives")
    assert "layers" not in addons.__all__ and "collectives" not in addons.__all__
    imported = "import sys, popxl_addons; print(sorted(m for m in sys.modules if m.startswith('popxl_addons.')))"
    modules = subprocess.run([sys.executable, "-c", imported], capture_output=True, text=True, check=True).stdout
    assert "popxl_addons.core" in modules and "popxl_addons.layers" not in modules
    assert "popxl_addons.collectives" not in modules and "popxl_addons.harness" not in modules
