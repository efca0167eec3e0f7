# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons`: as its programs import it (`import popxl_addons as addons; addons.Module`)."""

import importlib
from pkgutil import extend_path

from popxl_addons import (
    array_munging,
    debugging,
    dot_tree,
    graph,
    graph_cache,
    graph_common,
    module,
    named_replica_grouping,
    named_tensors,
    ops,
    optimizers,
    patterns,
    performance_utils,
    remote,
    route_tensor,
    rts,
    streams,
    task_session,
    transforms,
    utils,
    variable_factory,
)
from popxl_addons.array_munging import (
    handle_negative_axis,
    pad_axis,
    repeat,
    repeat_axis,
    repeat_shard,
    shard,
    shard2D,
    split2D,
    squeeze_safe,
    tensor_parallel_input,
    unshard,
    unshard2D,
    unshard_arrays,
)
from popxl_addons.debugging import print_tensor, print_text
from popxl_addons.graph import BoundGraph, GraphWithNamedArgs
from popxl_addons.graph_cache import (
    GraphCache,
    argument_hash,
    bound_arguments,
    function,
    get_function_hash,
    tensor_hash,
)
from popxl_addons.graph_common import CalledGraphsGradInfo, CalledGraphsGradInfoLike, GradGraphInfoLike, GraphLike
from popxl_addons.module import Module, NameScopeMeta, create_grad_graph_info
from popxl_addons.named_tensors import NamedTensors
from popxl_addons.ops import cross_entropy, cross_entropy_with_grad, fp8_amax_scale, host_load, host_store
from popxl_addons.performance_utils import (
    evaluate_FLOPs,
    evaluate_ir_FLOPs,
    format_flops_scientific,
    print_FLOPs,
    total_FLOPs,
)
from popxl_addons.remote import (
    create_remote_buffer,
    load_remote_graph,
    named_buffers,
    named_variable_buffers,
    store_remote_graph,
)
from popxl_addons.route_tensor import is_subgraph, route_tensor_into_graph
from popxl_addons.seed_variable import seed_variable
from popxl_addons.streams import InputStreams, OutputStreams
from popxl_addons.task_session import TaskSession, write_variables_pb
from popxl_addons.transforms import (
    RemoteHandle,
    add_recompute_inputs,
    autodiff,
    autodiff_with_accumulation,
    batch_serial_buffer,
    batch_serialise,
    batch_serialise_fwd_and_grad,
    disable_fc_pass,
    enable_fc_pass,
    pipelined_execution,
    recompute_graph,
    set_available_memory_proportion_by_ipu,
    set_graph_available_memory_proportion_by_ipu,
)
from popxl_addons.utils import OrderedDict, WeightsDict, duplicate_items, suffix_graph_name, timer
from popxl_addons.variable_factory import (
    NamedVariableFactories,
    VariableFactory,
    add_replica_sharded_variable_input,
    add_variable_input,
)

# Every installed folder of this package: an editable install keeps the harness's apart.
__path__ = extend_path(__path__, __name__)

# The commit of popxl-addons' own git checkout there; this project is not popxl-addons' repository.
GIT_COMMIT: str | None = None

__all__ = [
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
    "print_tensor",
    "print_text",
    "BoundGraph",
    "GraphWithNamedArgs",
    "GraphCache",
    "bound_arguments",
    "tensor_hash",
    "argument_hash",
    "get_function_hash",
    "function",
    "GraphLike",
    "GradGraphInfoLike",
    "CalledGraphsGradInfoLike",
    "CalledGraphsGradInfo",
    "Module",
    "NameScopeMeta",
    "create_grad_graph_info",
    "NamedTensors",
    "cross_entropy",
    "cross_entropy_with_grad",
    "fp8_amax_scale",
    "host_load",
    "host_store",
    "total_FLOPs",
    "evaluate_ir_FLOPs",
    "evaluate_FLOPs",
    "print_FLOPs",
    "format_flops_scientific",
    "load_remote_graph",
    "store_remote_graph",
    "named_buffers",
    "named_variable_buffers",
    "create_remote_buffer",
    "route_tensor_into_graph",
    "is_subgraph",
    "seed_variable",
    "InputStreams",
    "OutputStreams",
    "TaskSession",
    "write_variables_pb",
    "autodiff",
    "autodiff_with_accumulation",
    "set_available_memory_proportion_by_ipu",
    "set_graph_available_memory_proportion_by_ipu",
    "RemoteHandle",
    "batch_serial_buffer",
    "batch_serialise",
    "batch_serialise_fwd_and_grad",
    "pipelined_execution",
    "add_recompute_inputs",
    "recompute_graph",
    "disable_fc_pass",
    "enable_fc_pass",
    "timer",
    "OrderedDict",
    "WeightsDict",
    "suffix_graph_name",
    "duplicate_items",
    "VariableFactory",
    "NamedVariableFactories",
    "add_variable_input",
    "add_replica_sharded_variable_input",
    "GIT_COMMIT",
]


def __getattr__(name: str) -> object:
    """The sub-packages not imported with the package (`layers`, `collectives`, `harness`), on first use."""
    if name in ("layers", "collectives", "harness"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}", name=name)
