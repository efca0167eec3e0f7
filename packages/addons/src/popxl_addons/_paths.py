"""popxl-addons' public module paths, as this project offers them: the one table they are kept in.

For each path: the package of this project whose folder ships its file, each of its names with the
module it comes from, and the popxl-addons names it lacks. `python -m popxl_addons._shells` writes
every re-export module ("shell") from this table, and a test keeps the files equal to what it writes.
Moving a name inside `popxl_addons.core` changes the `From` source of its rows, nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Package = Literal["core", "layers", "collectives", "harness"]

ROOT = "popxl_addons"

# The sub-package each of this project's packages owns (its `src/popxl_addons/<name>/`).
SUBPACKAGES: dict[str, Package] = {
    "popxl_addons.core": "core",
    "popxl_addons.layers": "layers",
    "popxl_addons.collectives": "collectives",
    "popxl_addons.harness": "harness",
}


@dataclass(frozen=True)
class From:
    """Names of a module path and the module they come from."""

    source: str
    names: tuple[str, ...]
    # Imported when first used rather than with the module: the source's distribution may be absent.
    lazy: bool = False
    # In the module's `__all__`; popxl-addons leaves some of its names out of its own.
    listed: bool = True


@dataclass(frozen=True)
class ModulePath:
    """One of popxl-addons' module paths: who ships it, its names, and the names it lacks."""

    module: str
    package: Package
    sources: tuple[From, ...]
    # What the module is, for its docstring (a shell's) or the table's readers (an implementation's).
    doc: str = ""
    # popxl-addons names this project does not implement, each with what to use instead ("" for nothing).
    missing: Mapping[str, str] = field(default_factory=dict)
    # False where the module is the package's own implementation, written by hand.
    shell: bool = True

    @property
    def names(self) -> list[str]:
        """Every name the module offers, in the table's order."""
        return [name for source in self.sources for name in source.names]


def _path(module: str, source: str, *names: str, package: Package = "core", doc: str = "") -> ModulePath:
    # The common row: a shell re-exporting names of one module.
    return ModulePath(module, package, (From(source, names),), doc)


def _implementation(module: str, package: Package, *names: str) -> ModulePath:
    # A module of one of this project's packages that is itself a popxl-addons path.
    return ModulePath(module, package, (From(module, names),), shell=False)


_CORE = "popxl_addons.core"
_COLLECTIVES = "popxl_addons.collectives"

# Every path below the root.
_BELOW_ROOT: tuple[ModulePath, ...] = (
    ModulePath(
        "popxl_addons.array_munging",
        "core",
        (
            From(
                f"{_CORE}.session.array_munging",
                (
                    "shard",
                    "unshard_arrays",
                    "unshard",
                    "repeat",
                    "repeat_axis",
                    "split2D",
                    "shard2D",
                    "unshard2D",
                    "repeat_shard",
                    "tensor_parallel_input",
                    "pad_axis",
                    "squeeze_safe",
                    "handle_negative_axis",
                    "tensor_parallel_output",
                ),
            ),
        ),
    ),
    _path("popxl_addons.debugging", f"{_CORE}.debugging", "print_tensor", "print_text"),
    _path("popxl_addons.dot_tree", f"{_CORE}.modules.dot_tree", "DotTree", "sanitise", "to_mapping"),
    _path("popxl_addons.graph", f"{_CORE}.modules.graph", "BoundGraph", "GraphWithNamedArgs"),
    _path(
        "popxl_addons.graph_cache",
        f"{_CORE}.modules.graph_cache",
        "GraphCache",
        "bound_arguments",
        "tensor_hash",
        "argument_hash",
        "get_function_hash",
        "function",
    ),
    _path(
        "popxl_addons.graph_common",
        f"{_CORE}.modules.graph_common",
        "GraphLike",
        "GradGraphInfoLike",
        "CalledGraphsGradInfoLike",
        "CalledGraphsGradInfo",
    ),
    _path("popxl_addons.module", f"{_CORE}.modules.module", "Module", "NameScopeMeta", "create_grad_graph_info"),
    _path(
        "popxl_addons.named_replica_grouping",
        f"{_CORE}.modules.named_replica_grouping",
        "NamedReplicaGrouping",
        "fill_none_group",
        "get_instance_replica_grouping",
        "is_cross_instance",
        "get_ild_size_from_popdist",
        "get_ild_replica_grouping",
        "is_cross_ild",
        doc="with one instance (one process) the instance groupings are the groupings themselves; the"
        " IPU-Link-Domain ones only group replicas",
    ),
    ModulePath(
        "popxl_addons.named_tensors",
        "core",
        (
            From(f"{_CORE}.modules.named_tensors", ("NamedTensors", "TensorMap", "print_named_tensors")),
            From(f"{_CORE}.session.task_session", ("NamedTensorData",)),
        ),
    ),
    ModulePath(
        "popxl_addons.ops",
        "core",
        (
            From("popxl_addons.ops", ("streams",)),
            From("popxl_addons.ops.cross_entropy", ("cross_entropy", "cross_entropy_with_grad")),
            From("popxl_addons.ops.fp8_amax_scale", ("fp8_amax_scale",)),
            From("popxl_addons.ops.streams", ("host_load", "host_store")),
        ),
        doc="the ops this project has, under popxl-addons' names. As there, a function imported from the"
        " sub-module of its name is bound over it, and the custom ops' sub-packages import when asked for",
    ),
    _path(
        "popxl_addons.ops.cross_entropy",
        f"{_CORE}.ops.cross_entropy",
        "cross_entropy",
        "cross_entropy_with_grad",
    ),
    _path(
        "popxl_addons.ops.cross_entropy_sharded_loss",
        "popxl_addons.ops.cross_entropy_sharded_loss.cross_entropy_sharded_loss",
        "cross_entropy_sharded_loss",
        package="collectives",
    ),
    _path(
        "popxl_addons.ops.cross_entropy_sharded_loss.cross_entropy_sharded_loss",
        f"{_COLLECTIVES}.cross_entropy_sharded",
        "cross_entropy_sharded_loss",
        package="collectives",
    ),
    _path(
        "popxl_addons.ops.cross_entropy_sharded_wr_loss",
        "popxl_addons.ops.cross_entropy_sharded_wr_loss.cross_entropy_sharded_wr_loss",
        "cross_entropy_sharded_wr_loss",
        package="collectives",
    ),
    _path(
        "popxl_addons.ops.cross_entropy_sharded_wr_loss.cross_entropy_sharded_wr_loss",
        f"{_COLLECTIVES}.cross_entropy_sharded",
        "cross_entropy_sharded_wr_loss",
        package="collectives",
    ),
    _path("popxl_addons.ops.fp8_amax_scale", f"{_CORE}.ops.fp8_scale", "fp8_amax_scale"),
    _path("popxl_addons.ops.fp8_mse_scale", "popxl_addons.ops.fp8_mse_scale.fp8_mse_scale", "fp8_mse_scale"),
    _path("popxl_addons.ops.fp8_mse_scale.fp8_mse_scale", f"{_CORE}.ops.fp8_scale", "fp8_mse_scale"),
    _path(
        "popxl_addons.ops.fp8_utils",
        f"{_CORE}.ops.fp8_formats",
        "FpDef",
        "float8_143_def",
        "float8_152_def",
        "ieee_fp16_denorms",
        "ieee_fp32_no_denorms",
    ),
    _path(
        "popxl_addons.ops.grad_reduce_square_add",
        "popxl_addons.ops.grad_reduce_square_add.grad_reduce_square_add",
        "grad_reduce_square_add",
    ),
    _path(
        "popxl_addons.ops.grad_reduce_square_add.grad_reduce_square_add",
        f"{_CORE}.ops.grad_reduce_square_add",
        "grad_reduce_square_add",
    ),
    _path(
        "popxl_addons.ops.group_quantize_decompress",
        "popxl_addons.ops.group_quantize_decompress.group_quantize_decompress",
        "group_quantize_decompress",
        "group_quantize_decompress_numpy",
        "group_quantize_compress_numpy",
    ),
    _path(
        "popxl_addons.ops.group_quantize_decompress.group_quantize_decompress",
        f"{_CORE}.ops.group_quantize",
        "group_quantize_decompress",
        "group_quantize_decompress_numpy",
        "group_quantize_compress_numpy",
    ),
    _path(
        "popxl_addons.ops.layer_norm_distributed",
        "popxl_addons.ops.layer_norm_distributed.layer_norm_distributed",
        "layer_norm_distributed",
        package="collectives",
    ),
    _path(
        "popxl_addons.ops.layer_norm_distributed.layer_norm_distributed",
        f"{_COLLECTIVES}.layer_norm_distributed",
        "layer_norm_distributed",
        package="collectives",
    ),
    _path("popxl_addons.ops.linear_layout", "popxl_addons.ops.linear_layout.linear_layout", "linear_layout"),
    _path("popxl_addons.ops.linear_layout.linear_layout", f"{_CORE}.ops.linear_layout", "linear_layout"),
    _path(
        "popxl_addons.ops.replicated_all_reduce_TP",
        "popxl_addons.ops.replicated_all_reduce_TP.replicated_all_reduce_TP",
        "replicated_all_reduce_identical_inputs",
        "replicated_all_reduce_identical_grad_inputs",
        "replicated_all_reduce",
        package="collectives",
    ),
    _path(
        "popxl_addons.ops.replicated_all_reduce_TP.replicated_all_reduce_TP",
        f"{_COLLECTIVES}.all_reduce_tp",
        "replicated_all_reduce_identical_inputs",
        "replicated_all_reduce_identical_grad_inputs",
        "replicated_all_reduce",
        package="collectives",
    ),
    ModulePath(
        "popxl_addons.ops.replicated_strided_collectives",
        "collectives",
        (
            From(
                "popxl_addons.ops.replicated_strided_collectives.replicated_all_gather_strided",
                ("replicated_all_gather_strided",),
            ),
            From(
                "popxl_addons.ops.replicated_strided_collectives.replicated_all_reduce_strided",
                (
                    "replicated_all_reduce_strided",
                    "replicated_all_reduce_strided_identical_inputs",
                    "replicated_all_reduce_strided_identical_grad_inputs",
                    "replicated_all_reduce_strided_graph",
                ),
            ),
            From(
                "popxl_addons.ops.replicated_strided_collectives.replicated_reduce_scatter_strided",
                ("replicated_reduce_scatter_strided",),
            ),
        ),
    ),
    _path(
        "popxl_addons.ops.replicated_strided_collectives.replicated_all_gather_strided",
        f"{_COLLECTIVES}.strided",
        "replicated_all_gather_strided",
        package="collectives",
    ),
    _path(
        "popxl_addons.ops.replicated_strided_collectives.replicated_all_reduce_strided",
        f"{_COLLECTIVES}.strided",
        "replicated_all_reduce_strided",
        "replicated_all_reduce_strided_identical_inputs",
        "replicated_all_reduce_strided_identical_grad_inputs",
        "replicated_all_reduce_strided_graph",
        package="collectives",
    ),
    _path(
        "popxl_addons.ops.replicated_strided_collectives.replicated_reduce_scatter_strided",
        f"{_COLLECTIVES}.strided",
        "replicated_reduce_scatter_strided",
        package="collectives",
    ),
    _path(
        "popxl_addons.ops.rotary_pos_embed",
        "popxl_addons.ops.rotary_pos_embed.rotary_pos_embed",
        "rotary_pos_embed",
        "trig_tables",
        "trig_table_constants",
    ),
    _path(
        "popxl_addons.ops.rotary_pos_embed.rotary_pos_embed",
        f"{_CORE}.ops.rotary_pos_embed",
        "rotary_pos_embed",
        "trig_tables",
        "trig_table_constants",
    ),
    _path(
        "popxl_addons.ops.static_sparse_ops",
        "popxl_addons.ops.static_sparse_ops.dense_sparse_matmul",
        "dense_const_sparse_matmul",
        "random_sparse",
    ),
    _path(
        "popxl_addons.ops.static_sparse_ops.dense_sparse_matmul",
        f"{_CORE}.ops.static_sparse_ops",
        "dense_const_sparse_matmul",
        "random_sparse",
    ),
    _path("popxl_addons.ops.streams", f"{_CORE}.session.streams", "host_load", "host_store"),
    _path("popxl_addons.optimizers", "popxl_addons.optimizers.adam", "AdamOptimizerStep"),
    _path("popxl_addons.optimizers.adam", f"{_CORE}.optimizers", "AdamOptimizerStep"),
    _path("popxl_addons.patterns", f"{_CORE}.transforms.patterns", "apply_pre_alias_patterns", "patterns_level"),
    _path(
        "popxl_addons.performance_utils",
        f"{_CORE}.performance_utils",
        "total_FLOPs",
        "evaluate_ir_FLOPs",
        "evaluate_FLOPs",
        "print_FLOPs",
        "format_flops_scientific",
    ),
    _path(
        "popxl_addons.remote",
        f"{_CORE}.remote.remote",
        "load_remote_graph",
        "store_remote_graph",
        "named_buffers",
        "named_variable_buffers",
        "create_remote_buffer",
        "NamedRemoteBuffers",
        "load_remote",
        "store_remote",
    ),
    _path("popxl_addons.route_tensor", f"{_CORE}.transforms.route_tensor", "route_tensor_into_graph", "is_subgraph"),
    _path(
        "popxl_addons.rts",
        f"{_CORE}.remote.rts",
        "all_gather_replica_sharded_graph",
        "reduce_replica_sharded_graph",
        "reduce_replica_sharded_tensor",
        "gather_replica_sharded_tensor",
        "replica_sharded_spec",
    ),
    _path("popxl_addons.seed_variable", f"{_CORE}.remote.seed_variable", "seed_variable"),
    _path("popxl_addons.streams", f"{_CORE}.session.streams", "InputStreams", "OutputStreams"),
    _path(
        "popxl_addons.task_session",
        f"{_CORE}.session.task_session",
        "TaskSession",
        "write_variables_pb",
        "NamedTensorData",
        "initialise_memmap_dir_from_checkpoint",
    ),
    _path("popxl_addons.testing_utils", f"{_CORE}.session.testing_utils", "ops_of_type", "TensorInput", "run_module"),
    ModulePath(
        "popxl_addons.transforms",
        "core",
        (
            From(
                "popxl_addons.transforms",
                ("available_memory_proportion", "batch_serialisation", "pipelining", "recomputation", "use_fc_pass"),
            ),
            From("popxl_addons.transforms.autodiff", ("autodiff", "autodiff_with_accumulation")),
            From(
                "popxl_addons.transforms.available_memory_proportion",
                ("set_available_memory_proportion_by_ipu", "set_graph_available_memory_proportion_by_ipu"),
            ),
            From(
                "popxl_addons.transforms.batch_serialisation",
                ("RemoteHandle", "batch_serial_buffer", "batch_serialise", "batch_serialise_fwd_and_grad"),
            ),
            From("popxl_addons.transforms.pipelining", ("pipelined_execution",)),
            From("popxl_addons.transforms.recomputation", ("recompute_graph", "add_recompute_inputs")),
            From("popxl_addons.transforms.use_fc_pass", ("disable_fc_pass", "enable_fc_pass")),
        ),
    ),
    _path("popxl_addons.transforms.autodiff", f"{_CORE}.transforms.autodiff", "autodiff", "autodiff_with_accumulation"),
    _path(
        "popxl_addons.transforms.available_memory_proportion",
        f"{_CORE}.transforms.available_memory",
        "set_available_memory_proportion_by_ipu",
        "set_graph_available_memory_proportion_by_ipu",
        doc="the proportions are recorded on the ops and change nothing off an IPU",
    ),
    _path(
        "popxl_addons.transforms.batch_serialisation",
        f"{_CORE}.transforms.batch_serialisation",
        "batch_serialise",
        "batch_serialise_fwd_and_grad",
        "batch_serial_buffer",
        "RemoteHandle",
        "BatchSerialResult",
    ),
    ModulePath(
        "popxl_addons.transforms.pipelining",
        "core",
        (
            From(
                f"{_CORE}.transforms.pipelining",
                ("pipelined_execution", "StageContext", "Stash", "Restore", "get_op_pipeline_stage"),
            ),
        ),
        doc="the stages run one after another on one device (docs/pipelining.md)",
        missing={
            "Pipelining": "`pipelined_execution(steps)`, which builds the stages from the ops created in its context",
            "PipelineBoundGraph": "`pipelined_execution(steps)`; a stage's graph is not a graph of its own here",
        },
    ),
    _path(
        "popxl_addons.transforms.recomputation",
        f"{_CORE}.transforms.recomputation",
        "add_recompute_inputs",
        "recompute_graph",
    ),
    _path("popxl_addons.transforms.repeat_graph", f"{_CORE}.transforms.repeat_graph", "repeat_graph"),
    _path(
        "popxl_addons.transforms.use_fc_pass",
        f"{_CORE}.transforms.fc_pass",
        "disable_fc_pass",
        "enable_fc_pass",
        doc="the setting is recorded per matmul and has no effect here",
    ),
    ModulePath(
        "popxl_addons.utils",
        "core",
        (
            From(f"{_CORE}.utils", ("timer", "OrderedDict", "WeightsDict")),
            From(f"{_CORE}.utils", ("duplicate_items", "suffix_graph_name"), listed=False),
        ),
    ),
    _path(
        "popxl_addons.variable_factory",
        f"{_CORE}.modules.variable_factory",
        "VariableFactory",
        "NamedVariableFactories",
        "add_variable_input",
        "add_replica_sharded_variable_input",
        "host_scalar_tensor_types",
    ),
    # popxl-addons-layers' own modules, under popxl-addons' paths.
    ModulePath(
        "popxl_addons.layers",
        "layers",
        (
            From("popxl_addons.layers.conv", ("Conv2D",)),
            From("popxl_addons.layers.embedding", ("MULTISLICE_MAGIC_NUMBER", "Embedding")),
            From("popxl_addons.layers.group_norm", ("GroupNorm",)),
            From("popxl_addons.layers.layer_norm", ("LayerNorm",)),
            From("popxl_addons.layers.linear", ("Linear",)),
            From("popxl_addons.layers.linear_fp8", ("LinearFP8",)),
            From("popxl_addons.layers.linear_gq", ("LinearGQ",)),
            From("popxl_addons.layers.scale", ("Scale",)),
        ),
        shell=False,
    ),
    _implementation("popxl_addons.layers.conv", "layers", "Conv2D"),
    _implementation("popxl_addons.layers.embedding", "layers", "MULTISLICE_MAGIC_NUMBER", "Embedding"),
    _implementation("popxl_addons.layers.group_norm", "layers", "GroupNorm"),
    _implementation("popxl_addons.layers.layer_norm", "layers", "LayerNorm"),
    ModulePath(
        "popxl_addons.layers.layer_norm_distributed",
        "layers",
        (From(f"{_COLLECTIVES}.layer_norm_distributed_layer", ("LayerNormDistributed",), lazy=True),),
        doc="the layer is built on a collective op, so popxl-addons-collectives ships it and is imported on"
        " first use: popxl-addons-layers installs without it",
    ),
    _implementation("popxl_addons.layers.linear", "layers", "Linear"),
    _implementation("popxl_addons.layers.linear_fp8", "layers", "LinearFP8"),
    _implementation("popxl_addons.layers.linear_gq", "layers", "LinearGQ"),
)


def _everything(module: str, but: tuple[str, ...] = ()) -> From:
    # All the names of another path (but some), as popxl-addons' `from .module import *` gives the root its own.
    names = next(path.names for path in _BELOW_ROOT if path.module == module)
    return From(module, tuple(name for name in names if name not in but))


PATHS: tuple[ModulePath, ...] = (
    ModulePath(
        ROOT,
        "core",
        (
            From(
                ROOT,
                (
                    "array_munging",
                    "debugging",
                    "dot_tree",
                    "graph",
                    "graph_cache",
                    "graph_common",
                    "module",
                    "named_replica_grouping",
                    "named_tensors",
                    "ops",
                    "optimizers",
                    "patterns",
                    "performance_utils",
                    "remote",
                    "route_tensor",
                    "rts",
                    "streams",
                    "task_session",
                    "transforms",
                    "utils",
                    "variable_factory",
                ),
            ),
            # The other distributions' sub-packages (the harness is heavy too), on first use.
            From(ROOT, ("layers", "collectives", "harness"), lazy=True, listed=False),
            _everything("popxl_addons.array_munging", but=("tensor_parallel_output",)),
            _everything("popxl_addons.debugging"),
            _everything("popxl_addons.graph"),
            _everything("popxl_addons.graph_cache"),
            _everything("popxl_addons.graph_common"),
            _everything("popxl_addons.module"),
            From("popxl_addons.named_tensors", ("NamedTensors",)),
            _everything("popxl_addons.ops", but=("streams",)),
            _everything("popxl_addons.performance_utils"),
            _everything("popxl_addons.remote", but=("NamedRemoteBuffers", "load_remote", "store_remote")),
            _everything("popxl_addons.route_tensor"),
            # The function, as in popxl-addons, not the module.
            _everything("popxl_addons.seed_variable"),
            _everything("popxl_addons.streams"),
            _everything("popxl_addons.task_session", but=("NamedTensorData", "initialise_memmap_dir_from_checkpoint")),
            _everything(
                "popxl_addons.transforms",
                but=(
                    "available_memory_proportion",
                    "batch_serialisation",
                    "pipelining",
                    "recomputation",
                    "use_fc_pass",
                ),
            ),
            _everything("popxl_addons.utils"),
            _everything("popxl_addons.variable_factory", but=("host_scalar_tensor_types",)),
        ),
        doc="as its programs import it (`import popxl_addons as addons; addons.Module`)",
    ),
    *_BELOW_ROOT,
)

BY_MODULE: dict[str, ModulePath] = {path.module: path for path in PATHS}


def parent(module: str) -> str:
    """The package that holds `module`."""
    return module.rpartition(".")[0]


def package_of(module: str) -> Package:
    """The package of this project that ships `module` (a path of the table, or a sub-package)."""
    return SUBPACKAGES[module] if module in SUBPACKAGES else BY_MODULE[module].package


# The folder under packages/ of each package, and the distribution built from it: one for popxl-addons' own
# code, one for the harness.
FOLDERS: dict[Package, str] = {"core": "addons", "layers": "addons", "collectives": "addons", "harness": "harness"}
DISTRIBUTIONS = {"addons": "popxl-addons", "harness": "popxl-addons-harness"}


def folder_of(module: str) -> str:
    """The folder under packages/ that ships `module`."""
    return FOLDERS[package_of(module)]


def distribution(module: str) -> str:
    """The distribution that ships `module`."""
    return DISTRIBUTIONS[folder_of(module)]


def _known() -> list[str]:
    return [*BY_MODULE, *SUBPACKAGES]


def shipped_apart(module: str) -> bool:
    """Whether `module` (any name) is a path of the table or a sub-package shipped by another distribution
    than its parent package: where, that distribution missing, importing it fails."""
    return module in _known() and module != ROOT and folder_of(module) != folder_of(parent(module))


def is_package(module: str) -> bool:
    """Whether `module` has sub-modules (an `__init__.py`) rather than being one file."""
    return any(parent(other) == module for other in _known())


def spans_distributions(module: str) -> bool:
    """Whether some sub-module of the package `module` ships in another distribution than its own."""
    return any(parent(other) == module and shipped_apart(other) for other in _known())


def missing_names() -> list[tuple[str, str, str]]:
    """Every popxl-addons name this project lacks: (module, name, what to use instead)."""
    return [(path.module, name, instead) for path in PATHS for name, instead in path.missing.items()]
