"""popxl-addons' module paths import as its programs spell them, and re-export this project's names."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
import typing
from pathlib import Path

import pytest

import popxl_addons
import popxl_addons as addons
import popxl_addons.core
from popxl_addons import _compat

# Every popxl-addons module path that popxl-addons-core ships.
CORE_PATHS = [
    "popxl_addons",
    "popxl_addons.array_munging",
    "popxl_addons.debugging",
    "popxl_addons.dot_tree",
    "popxl_addons.graph",
    "popxl_addons.graph_cache",
    "popxl_addons.graph_common",
    "popxl_addons.module",
    "popxl_addons.named_replica_grouping",
    "popxl_addons.named_tensors",
    "popxl_addons.optimizers",
    "popxl_addons.optimizers.adam",
    "popxl_addons.patterns",
    "popxl_addons.performance_utils",
    "popxl_addons.remote",
    "popxl_addons.route_tensor",
    "popxl_addons.rts",
    "popxl_addons.seed_variable",
    "popxl_addons.streams",
    "popxl_addons.task_session",
    "popxl_addons.testing_utils",
    "popxl_addons.utils",
    "popxl_addons.variable_factory",
    "popxl_addons.transforms",
    "popxl_addons.transforms.autodiff",
    "popxl_addons.transforms.available_memory_proportion",
    "popxl_addons.transforms.batch_serialisation",
    "popxl_addons.transforms.pipelining",
    "popxl_addons.transforms.recomputation",
    "popxl_addons.transforms.repeat_graph",
    "popxl_addons.transforms.use_fc_pass",
    "popxl_addons.ops",
    "popxl_addons.ops.streams",
    "popxl_addons.ops.cross_entropy",
    "popxl_addons.ops.fp8_amax_scale",
    "popxl_addons.ops.fp8_utils",
    "popxl_addons.ops.cross_entropy_sharded_loss",
    "popxl_addons.ops.cross_entropy_sharded_loss.cross_entropy_sharded_loss",
    "popxl_addons.ops.cross_entropy_sharded_wr_loss",
    "popxl_addons.ops.cross_entropy_sharded_wr_loss.cross_entropy_sharded_wr_loss",
    "popxl_addons.ops.fp8_mse_scale",
    "popxl_addons.ops.fp8_mse_scale.fp8_mse_scale",
    "popxl_addons.ops.grad_reduce_square_add",
    "popxl_addons.ops.grad_reduce_square_add.grad_reduce_square_add",
    "popxl_addons.ops.group_quantize_decompress",
    "popxl_addons.ops.group_quantize_decompress.group_quantize_decompress",
    "popxl_addons.ops.layer_norm_distributed",
    "popxl_addons.ops.layer_norm_distributed.layer_norm_distributed",
    "popxl_addons.ops.linear_layout",
    "popxl_addons.ops.linear_layout.linear_layout",
    "popxl_addons.ops.rotary_pos_embed",
    "popxl_addons.ops.rotary_pos_embed.rotary_pos_embed",
    "popxl_addons.ops.static_sparse_ops",
    "popxl_addons.ops.static_sparse_ops.dense_sparse_matmul",
]

# popxl-addons' paths that other distributions ship (tested when installed).
OTHER_PATHS = {
    "popxl-addons-layers": [
        "popxl_addons.layers",
        "popxl_addons.layers.conv",
        "popxl_addons.layers.embedding",
        "popxl_addons.layers.group_norm",
        "popxl_addons.layers.layer_norm",
        "popxl_addons.layers.layer_norm_distributed",
        "popxl_addons.layers.linear",
        "popxl_addons.layers.linear_fp8",
        "popxl_addons.layers.linear_gq",
    ],
    "popxl-addons-collectives": [
        "popxl_addons.ops.replicated_all_reduce_TP",
        "popxl_addons.ops.replicated_all_reduce_TP.replicated_all_reduce_TP",
        "popxl_addons.ops.replicated_strided_collectives",
        "popxl_addons.ops.replicated_strided_collectives.replicated_all_gather_strided",
        "popxl_addons.ops.replicated_strided_collectives.replicated_all_reduce_strided",
        "popxl_addons.ops.replicated_strided_collectives.replicated_reduce_scatter_strided",
    ],
}

# Sub-packages whose modules define the names; a popxl-addons path only re-exports them.
OWNERS = ("popxl_addons.core", "popxl_addons.layers", "popxl_addons.collectives")


def _installed(dist: str) -> bool:
    top = {"popxl-addons-layers": "popxl_addons.layers", "popxl-addons-collectives": "popxl_addons.collectives"}[dist]
    try:
        return importlib.util.find_spec(top) is not None
    except ModuleNotFoundError:  # the finder naming the distribution to install
        return False


def _all_paths() -> list[str]:
    paths = list(CORE_PATHS)
    for dist, more in OTHER_PATHS.items():
        if _installed(dist):
            paths += more
    return paths


@pytest.mark.parametrize("path", CORE_PATHS + [p for ps in OTHER_PATHS.values() for p in ps])
def test_every_popxl_addons_path_imports(path: str) -> None:
    dist = next((d for d, ps in OTHER_PATHS.items() if path in ps), None)
    if dist is not None and not _installed(dist):
        with pytest.raises(ModuleNotFoundError, match=dist):
            importlib.import_module(path)
        return
    module = importlib.import_module(path)
    assert module.__name__ == path
    # popxl-addons' own modules that this project keeps as they are (layers.linear) have no __all__.
    assert isinstance(getattr(module, "__all__", []), list)


def test_re_exports_are_this_projects_objects() -> None:
    """Every name a popxl-addons path exports is defined in the sub-package that owns it."""
    for path in _all_paths():
        module = importlib.import_module(path)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if name == "GIT_COMMIT" or isinstance(obj, int | float | str):
                continue  # plain values (MULTISLICE_MAGIC_NUMBER) have no defining module
            if typing.get_origin(obj) is not None or isinstance(obj, dict | tuple):
                continue  # nor have type aliases (GraphLike) and tables (patterns_level, host_scalar_tensor_types)
            if isinstance(obj, types.ModuleType):
                assert obj.__name__.startswith("popxl_addons."), (path, name)
                continue
            assert obj.__module__.startswith(OWNERS), f"{path}.{name} is defined in {obj.__module__}"


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
    assert addons.named_tensors.NamedTensorData is core.NamedTensorData
    assert addons.optimizers.adam.AdamOptimizerStep is core.AdamOptimizerStep
    assert addons.patterns.apply_pre_alias_patterns is core.apply_pre_alias_patterns
    assert addons.GIT_COMMIT is None
    star: dict[str, object] = {}
    exec("from popxl_addons import *", star)
    assert star["Module"] is core.Module and star["transforms"] is addons.transforms
    assert sorted(n for n in star if n != "__builtins__") == sorted(addons.__all__)


def test_missing_names_raise_not_implemented_yet() -> None:
    for path in _all_paths():
        importlib.import_module(path)
    assert "popxl_addons" in _compat.PENDING and "popxl_addons.transforms.pipelining" in _compat.PENDING
    for path, names in _compat.PENDING.items():
        module = sys.modules[path]
        for name in names:
            try:
                found = getattr(module, name)
            except _compat.NotImplementedYetError as e:
                assert str(e) == f"{path}.{name} is a popxl-addons name that this project does not implement yet"
                assert isinstance(e, ImportError)
            except _compat.MissingDistributionError as e:  # implemented in a distribution not installed here
                assert "pip install popxl-addons-" in str(e)
            else:  # implemented since in the owning sub-package: re-exported from there
                assert found.__module__.startswith(OWNERS)
            assert name not in getattr(module, "__all__", [])
    with pytest.raises(_compat.NotImplementedYetError, match=r"popxl_addons\.transforms\.pipelining\.Pipelining"):
        from popxl_addons.transforms.pipelining import Pipelining  # noqa: F401
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        addons.not_a_name  # noqa: B018
    assert not hasattr(addons.ops, "not_a_name")


_OPS = ("replicated_all_reduce_TP", "replicated_strided_collectives")
_HIDDEN = ("popxl_addons.layers", "popxl_addons.collectives", "popxl_addons.ops.replicated_")


def test_missing_distribution_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """With popxl-addons-layers not installed, `addons.layers` says which distribution to install."""
    core_dir = str(Path(popxl_addons.__file__).parent)
    # As if the other distributions' folders were absent.
    monkeypatch.setattr(popxl_addons, "__path__", [core_dir])
    monkeypatch.setattr(popxl_addons.ops, "__path__", [str(Path(core_dir, "ops"))])
    for name in [n for n in sys.modules if n.startswith(_HIDDEN)]:
        monkeypatch.delitem(sys.modules, name)
    # (vars, not hasattr: asking for a missing distribution's package raises the error under test.)
    for package, attrs in [(popxl_addons, ("layers", "collectives")), (popxl_addons.ops, _OPS)]:
        for attr in attrs:
            if attr in vars(package):
                monkeypatch.delattr(package, attr)
    with pytest.raises(_compat.MissingDistributionError, match="pip install popxl-addons-layers"):
        addons.layers  # noqa: B018
    with pytest.raises(ModuleNotFoundError, match="popxl-addons-layers") as e:
        from popxl_addons.layers import Linear  # noqa: F401
    assert e.value.name == "popxl_addons.layers"
    with pytest.raises(ModuleNotFoundError, match="popxl-addons-collectives"):
        importlib.import_module("popxl_addons.ops.replicated_all_reduce_TP")
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'popxl_addons\.nothing'"):
        importlib.import_module("popxl_addons.nothing")  # other missing paths keep Python's message
    assert addons.Module is popxl_addons.core.Module  # the rest is unaffected


def test_finder_is_last_and_installed_once() -> None:
    finders = [f for f in sys.meta_path if isinstance(f, _compat.MissingDistributionFinder)]
    assert len(finders) == 1
    _compat.install_finder()
    assert [f for f in sys.meta_path if isinstance(f, _compat.MissingDistributionFinder)] == finders
