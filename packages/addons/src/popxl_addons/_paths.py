"""popxl-addons' public module paths, as this project offers them: the one table they are kept in.

Each row is a path and the modules its names come from. The names themselves are each source module's
`__all__` (all of them, or the subset the row says with `only` or `but`), so a public name is written
once, in its own module; a path re-exporting another path of the table takes the names of that one's
row. A row also names the popxl-addons names this project lacks, with what to use instead.

`python -m tools.shells` (from the repository's root) writes every re-export module ("shell") from
this table, `popxl_addons/core/__init__.py` included; tools/tests/test_shells.py fails while the
committed files differ from what it writes. Adding a public name is one edit (its module's `__all__`)
and that command.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field

ROOT = "popxl_addons"
CORE = "popxl_addons.core"
_COLLECTIVES = "popxl_addons.collectives"


@dataclass(frozen=True)
class From:
    """A module whose names a path re-exports: every name it offers (`names_of`), `only` some, or all `but` some."""

    source: str
    only: tuple[str, ...] = ()
    but: tuple[str, ...] = ()

    def names(self) -> list[str]:
        """The names the path takes from `source`, in the order `source` lists them."""
        offered = names_of(self.source)
        unknown = sorted(set(self.only + self.but) - set(offered))
        if unknown:
            raise ValueError(f"{self.source} offers no {', '.join(unknown)}: the table names them")
        return [name for name in offered if (not self.only or name in self.only) and name not in self.but]


@dataclass(frozen=True)
class ModulePath:
    """One of popxl-addons' module paths: where its names come from, and the names it lacks."""

    module: str
    sources: tuple[From, ...]
    # Its sub-modules that it offers as names (imported with it).
    submodules: tuple[str, ...] = ()
    # Its sub-packages that it imports when first asked for rather than with it.
    first_use: tuple[str, ...] = ()
    # What the module is, for its docstring.
    doc: str = ""
    # popxl-addons names this project does not implement, each with what to use instead ("" for nothing).
    missing: Mapping[str, str] = field(default_factory=dict)
    # False where the module is written by hand: a module of this project that is itself a popxl-addons path.
    shell: bool = True

    def names(self) -> list[str]:
        """Every name the module offers, in the order of the row."""
        return [*self.submodules, *(name for source in self.sources for name in source.names())]


def names_of(module: str) -> list[str]:
    """The names another path takes from `module`: a shell's from its row's sources, any other module's
    from its `__all__` (imported)."""
    path = BY_MODULE.get(module)
    if path is not None and path.shell:
        return [name for source in path.sources for name in source.names()]
    return list(importlib.import_module(module).__all__)


def _path(module: str, source: str, only: tuple[str, ...] = (), but: tuple[str, ...] = (), doc: str = "") -> ModulePath:
    # The common row: a shell re-exporting the names of one module.
    return ModulePath(module, (From(source, only, but),), doc=doc)


def _own(module: str) -> ModulePath:
    # A module of this project at a popxl-addons path: written by hand, the row says that the path exists.
    return ModulePath(module, (From(module),), shell=False)


def _package(module: str, *sources: str, submodules: tuple[str, ...] = (), doc: str = "") -> ModulePath:
    # A package re-exporting every name of each of its sources.
    return ModulePath(module, tuple(From(source) for source in sources), submodules, doc=doc)


def _op(name: str, source: str, only: tuple[str, ...] = (), but: tuple[str, ...] = ()) -> tuple[ModulePath, ...]:
    # One of popxl-addons' custom ops: the package `ops.<name>` and its module `ops.<name>.<name>`.
    inner = f"popxl_addons.ops.{name}.{name}"
    return _path(f"popxl_addons.ops.{name}", inner), _path(inner, source, only, but)


_LAYERS = ("conv", "embedding", "group_norm", "layer_norm", "linear", "linear_fp8", "linear_gq")
_STRIDED = "popxl_addons.ops.replicated_strided_collectives"
_ALL_GATHER_STRIDED = ("replicated_all_gather_strided",)
_REDUCE_SCATTER_STRIDED = ("replicated_reduce_scatter_strided",)

# Every path below the root.
_BELOW_ROOT: tuple[ModulePath, ...] = (
    _path("popxl_addons.array_munging", f"{CORE}.session.array_munging"),
    _path("popxl_addons.debugging", f"{CORE}.debugging"),
    _path("popxl_addons.dot_tree", f"{CORE}.modules.dot_tree"),
    _path("popxl_addons.graph", f"{CORE}.modules.graph", but=("GradGraphBuilder",)),
    _path("popxl_addons.graph_cache", f"{CORE}.modules.graph_cache"),
    _path("popxl_addons.graph_common", f"{CORE}.modules.graph_common"),
    _path("popxl_addons.module", f"{CORE}.modules.module"),
    _path(
        "popxl_addons.named_replica_grouping",
        f"{CORE}.modules.named_replica_grouping",
        doc="with one instance (one process) the instance groupings are the groupings themselves; the"
        " IPU-Link-Domain ones only group replicas",
    ),
    ModulePath(
        "popxl_addons.named_tensors",
        (From(f"{CORE}.modules.named_tensors"), From(f"{CORE}.session.task_session", only=("NamedTensorData",))),
    ),
    _package(
        "popxl_addons.ops",
        "popxl_addons.ops.cross_entropy",
        "popxl_addons.ops.fp8_amax_scale",
        "popxl_addons.ops.streams",
        submodules=("streams",),
        doc="the ops this project has, under popxl-addons' names. As there, a function imported from the"
        " sub-module of its name is bound over it, and the custom ops' sub-packages import when asked for",
    ),
    _path("popxl_addons.ops.cross_entropy", f"{CORE}.ops.cross_entropy"),
    *_op("cross_entropy_sharded_loss", f"{_COLLECTIVES}.cross_entropy_sharded", only=("cross_entropy_sharded_loss",)),
    *_op(
        "cross_entropy_sharded_wr_loss",
        f"{_COLLECTIVES}.cross_entropy_sharded",
        only=("cross_entropy_sharded_wr_loss",),
    ),
    _path("popxl_addons.ops.fp8_amax_scale", f"{CORE}.ops.fp8_scale", only=("fp8_amax_scale",)),
    *_op("fp8_mse_scale", f"{CORE}.ops.fp8_scale", only=("fp8_mse_scale",)),
    _path("popxl_addons.ops.fp8_utils", f"{CORE}.ops.fp8_formats", but=("float8_def",)),
    *_op("grad_reduce_square_add", f"{CORE}.ops.grad_reduce_square_add"),
    *_op("group_quantize_decompress", f"{CORE}.ops.group_quantize"),
    *_op("layer_norm_distributed", f"{_COLLECTIVES}.layer_norm_distributed"),
    *_op("linear_layout", f"{CORE}.ops.linear_layout"),
    *_op("replicated_all_reduce_TP", f"{_COLLECTIVES}.all_reduce_tp", but=("PatternNotAppliedError",)),
    _package(
        _STRIDED,
        f"{_STRIDED}.replicated_all_gather_strided",
        f"{_STRIDED}.replicated_all_reduce_strided",
        f"{_STRIDED}.replicated_reduce_scatter_strided",
    ),
    _path(f"{_STRIDED}.replicated_all_gather_strided", f"{_COLLECTIVES}.strided", only=_ALL_GATHER_STRIDED),
    _path(
        f"{_STRIDED}.replicated_all_reduce_strided",
        f"{_COLLECTIVES}.strided",
        but=(*_ALL_GATHER_STRIDED, *_REDUCE_SCATTER_STRIDED),
    ),
    _path(f"{_STRIDED}.replicated_reduce_scatter_strided", f"{_COLLECTIVES}.strided", only=_REDUCE_SCATTER_STRIDED),
    *_op("rotary_pos_embed", f"{CORE}.ops.rotary_pos_embed"),
    _path("popxl_addons.ops.static_sparse_ops", "popxl_addons.ops.static_sparse_ops.dense_sparse_matmul"),
    _path("popxl_addons.ops.static_sparse_ops.dense_sparse_matmul", f"{CORE}.ops.static_sparse_ops"),
    _path("popxl_addons.ops.streams", f"{CORE}.session.streams", only=("host_load", "host_store")),
    _path("popxl_addons.optimizers", "popxl_addons.optimizers.adam"),
    _path("popxl_addons.optimizers.adam", f"{CORE}.optimizers"),
    _path("popxl_addons.patterns", f"{CORE}.transforms.patterns", but=("PatternsLevel",)),
    _path("popxl_addons.performance_utils", f"{CORE}.performance_utils"),
    _path("popxl_addons.remote", f"{CORE}.remote.remote"),
    _path("popxl_addons.route_tensor", f"{CORE}.transforms.route_tensor"),
    _path("popxl_addons.rts", f"{CORE}.remote.rts", but=("gather_replica_sharded",)),
    _path("popxl_addons.seed_variable", f"{CORE}.remote.seed_variable"),
    _path("popxl_addons.streams", f"{CORE}.session.streams", but=("host_load", "host_store")),
    _path("popxl_addons.task_session", f"{CORE}.session.task_session"),
    _path("popxl_addons.testing_utils", f"{CORE}.session.testing_utils"),
    ModulePath(
        "popxl_addons.transforms",
        (
            From("popxl_addons.transforms.autodiff"),
            From("popxl_addons.transforms.available_memory_proportion"),
            From("popxl_addons.transforms.batch_serialisation", but=("BatchSerialResult",)),
            From("popxl_addons.transforms.pipelining", only=("pipelined_execution",)),
            From("popxl_addons.transforms.recomputation"),
            From("popxl_addons.transforms.use_fc_pass"),
        ),
        submodules=("available_memory_proportion", "batch_serialisation", "pipelining", "recomputation", "use_fc_pass"),
    ),
    _path("popxl_addons.transforms.autodiff", f"{CORE}.transforms.autodiff"),
    _path(
        "popxl_addons.transforms.available_memory_proportion",
        f"{CORE}.transforms.available_memory",
        but=("available_memory_proportion",),
        doc="the proportions are recorded on the ops and change nothing off an IPU",
    ),
    _path("popxl_addons.transforms.batch_serialisation", f"{CORE}.transforms.batch_serialisation", but=("IO_MODES",)),
    ModulePath(
        "popxl_addons.transforms.pipelining",
        (From(f"{CORE}.transforms.pipelining"),),
        doc="the stages run one after another on one device (docs/pipelining.md)",
        missing={
            "Pipelining": "`pipelined_execution(steps)`, which builds the stages from the ops created in its context",
            "PipelineBoundGraph": "`pipelined_execution(steps)`; a stage's graph is not a graph of its own here",
        },
    ),
    _path("popxl_addons.transforms.recomputation", f"{CORE}.transforms.recomputation"),
    _path("popxl_addons.transforms.repeat_graph", f"{CORE}.transforms.repeat_graph"),
    _path(
        "popxl_addons.transforms.use_fc_pass",
        f"{CORE}.transforms.fc_pass",
        but=("uses_fc_pass",),
        doc="the setting is recorded per matmul and has no effect here",
    ),
    _path("popxl_addons.utils", f"{CORE}.utils"),
    _path("popxl_addons.variable_factory", f"{CORE}.modules.variable_factory"),
    # The layers' own modules are popxl-addons' paths (`scale` is this project's).
    _package(
        "popxl_addons.layers",
        *(f"popxl_addons.layers.{name}" for name in (*_LAYERS, "scale")),
        doc="Linear, LayerNorm, GroupNorm, Conv2D, Embedding, Scale and the FP8 and group-quantised linears",
    ),
    *(_own(f"popxl_addons.layers.{name}") for name in _LAYERS),
    _path("popxl_addons.layers.layer_norm_distributed", f"{_COLLECTIVES}.layer_norm_distributed_layer"),
    # This project's package of collectives, beside their popxl-addons paths above.
    _package(
        _COLLECTIVES,
        *(f"{_COLLECTIVES}.{name}" for name in ("all_reduce_tp", "cross_entropy_sharded", "layer_norm_distributed")),
        *(f"{_COLLECTIVES}.{name}" for name in ("layer_norm_distributed_layer", "strided")),
        doc="tensor-parallel all-reduces with special gradients, strided collectives, the layer norm of a"
        " sharded hidden axis, and the cross entropy of logits whose classes are sharded",
    ),
)


def _core() -> ModulePath:
    # popxl_addons.core: every name of each core module that a path above re-exports, and the planner's entry points.
    modules = sorted({s.source for path in _BELOW_ROOT for s in path.sources if s.source.startswith(f"{CORE}.")})
    planner = From(f"{CORE}.planning", only=("SerialisationPlan", "plan_batch_serialisation"))
    return ModulePath(
        CORE,
        (*(From(module) for module in modules), planner),
        submodules=("transforms",),
        doc="modules, named tensors, autodiff with accumulation and batch serialisation; the names of its"
        " sub-packages, which hold them by what they do (the table in packages/addons/README.md)",
    )


PATHS: tuple[ModulePath, ...] = (
    ModulePath(
        ROOT,
        (
            # As popxl-addons' `from .module import *` gives the root the names of its paths (but some).
            From("popxl_addons.array_munging", but=("tensor_parallel_output",)),
            From("popxl_addons.debugging"),
            From("popxl_addons.graph"),
            From("popxl_addons.graph_cache"),
            From("popxl_addons.graph_common"),
            From("popxl_addons.module"),
            From("popxl_addons.named_tensors", only=("NamedTensors",)),
            From("popxl_addons.ops"),
            From("popxl_addons.performance_utils"),
            From("popxl_addons.remote", but=("NamedRemoteBuffers", "load_remote", "store_remote")),
            From("popxl_addons.route_tensor"),
            # The function, as in popxl-addons, not the module.
            From("popxl_addons.seed_variable"),
            From("popxl_addons.streams"),
            From("popxl_addons.task_session", but=("NamedTensorData", "initialise_memmap_dir_from_checkpoint")),
            From("popxl_addons.transforms"),
            From("popxl_addons.utils"),
            From("popxl_addons.variable_factory", but=("host_scalar_tensor_types",)),
        ),
        submodules=(
            *("array_munging", "debugging", "dot_tree", "graph", "graph_cache", "graph_common", "module"),
            *("named_replica_grouping", "named_tensors", "ops", "optimizers", "patterns", "performance_utils"),
            *("remote", "route_tensor", "rts", "streams", "task_session", "transforms", "utils", "variable_factory"),
        ),
        # Not imported with the root, as in popxl-addons (the harness, a distribution of its own, is heavy too).
        first_use=("layers", "collectives", "harness"),
        doc="as its programs import it (`import popxl_addons as addons; addons.Module`)",
    ),
    _core(),
    *_BELOW_ROOT,
)

BY_MODULE: dict[str, ModulePath] = {path.module: path for path in PATHS}


def missing_names() -> list[tuple[str, str, str]]:
    """Every popxl-addons name this project lacks: (module, name, what to use instead)."""
    return [(path.module, name, instead) for path in PATHS for name, instead in path.missing.items()]
