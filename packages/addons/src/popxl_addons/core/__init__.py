# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.core`: modules, named tensors, autodiff with accumulation and batch serialisation; the
names of its sub-packages, which hold them by what they do (the table in packages/addons/README.md)."""

from popxl_addons.core import transforms
from popxl_addons.core.debugging import print_tensor, print_text
from popxl_addons.core.modules.dot_tree import DotTree, sanitise, to_mapping
from popxl_addons.core.modules.graph import BoundGraph, GradGraphBuilder, GraphWithNamedArgs
from popxl_addons.core.modules.graph_cache import (
    GraphCache,
    argument_hash,
    bound_arguments,
    function,
    get_function_hash,
    tensor_hash,
)
from popxl_addons.core.modules.graph_common import (
    CalledGraphsGradInfo,
    CalledGraphsGradInfoLike,
    GradGraphInfoLike,
    GraphLike,
)
from popxl_addons.core.modules.module import Module, NameScopeMeta, create_grad_graph_info
from popxl_addons.core.modules.named_replica_grouping import (
    NamedReplicaGrouping,
    fill_none_group,
    get_ild_replica_grouping,
    get_ild_size_from_popdist,
    get_instance_replica_grouping,
    is_cross_ild,
    is_cross_instance,
)
from popxl_addons.core.modules.named_tensors import NamedTensors, TensorMap, print_named_tensors
from popxl_addons.core.modules.variable_factory import (
    NamedVariableFactories,
    VariableFactory,
    add_replica_sharded_variable_input,
    add_variable_input,
    host_scalar_tensor_types,
)
from popxl_addons.core.ops.cross_entropy import cross_entropy, cross_entropy_with_grad
from popxl_addons.core.ops.fp8_formats import (
    FpDef,
    float8_143_def,
    float8_152_def,
    float8_def,
    ieee_fp16_denorms,
    ieee_fp32_no_denorms,
)
from popxl_addons.core.ops.fp8_scale import fp8_amax_scale, fp8_mse_scale
from popxl_addons.core.ops.grad_reduce_square_add import grad_reduce_square_add
from popxl_addons.core.ops.group_quantize import (
    group_quantize_compress_numpy,
    group_quantize_decompress,
    group_quantize_decompress_numpy,
)
from popxl_addons.core.ops.linear_layout import linear_layout
from popxl_addons.core.ops.rotary_pos_embed import rotary_pos_embed, trig_table_constants, trig_tables
from popxl_addons.core.ops.static_sparse_ops import dense_const_sparse_matmul, random_sparse
from popxl_addons.core.optimizers import AdamOptimizerStep
from popxl_addons.core.performance_utils import (
    evaluate_FLOPs,
    evaluate_ir_FLOPs,
    format_flops_scientific,
    print_FLOPs,
    total_FLOPs,
)
from popxl_addons.core.planning import SerialisationPlan, plan_batch_serialisation
from popxl_addons.core.remote.remote import (
    NamedRemoteBuffers,
    create_remote_buffer,
    load_remote,
    load_remote_graph,
    named_buffers,
    named_variable_buffers,
    store_remote,
    store_remote_graph,
)
from popxl_addons.core.remote.rts import (
    all_gather_replica_sharded_graph,
    gather_replica_sharded,
    gather_replica_sharded_tensor,
    reduce_replica_sharded_graph,
    reduce_replica_sharded_tensor,
    replica_sharded_spec,
)
from popxl_addons.core.remote.seed_variable import seed_variable
from popxl_addons.core.session.array_munging import (
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
    tensor_parallel_output,
    unshard,
    unshard2D,
    unshard_arrays,
)
from popxl_addons.core.session.streams import InputStreams, OutputStreams, host_load, host_store
from popxl_addons.core.session.task_session import (
    NamedTensorData,
    TaskSession,
    initialise_memmap_dir_from_checkpoint,
    write_variables_pb,
)
from popxl_addons.core.session.testing_utils import TensorInput, ops_of_type, run_module
from popxl_addons.core.transforms.autodiff import autodiff, autodiff_with_accumulation
from popxl_addons.core.transforms.available_memory import (
    available_memory_proportion,
    set_available_memory_proportion_by_ipu,
    set_graph_available_memory_proportion_by_ipu,
)
from popxl_addons.core.transforms.batch_serialisation import (
    IO_MODES,
    BatchSerialResult,
    RemoteHandle,
    batch_serial_buffer,
    batch_serialise,
    batch_serialise_fwd_and_grad,
)
from popxl_addons.core.transforms.fc_pass import disable_fc_pass, enable_fc_pass, uses_fc_pass
from popxl_addons.core.transforms.patterns import PatternsLevel, apply_pre_alias_patterns, patterns_level
from popxl_addons.core.transforms.pipelining import (
    Restore,
    StageContext,
    Stash,
    get_op_pipeline_stage,
    pipelined_execution,
)
from popxl_addons.core.transforms.recomputation import add_recompute_inputs, recompute_graph
from popxl_addons.core.transforms.repeat_graph import repeat_graph
from popxl_addons.core.transforms.route_tensor import is_subgraph, route_tensor_into_graph
from popxl_addons.core.utils import OrderedDict, WeightsDict, duplicate_items, suffix_graph_name, timer

__all__ = [
    "transforms",
    "print_tensor",
    "print_text",
    "DotTree",
    "sanitise",
    "to_mapping",
    "BoundGraph",
    "GraphWithNamedArgs",
    "GradGraphBuilder",
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
    "NamedReplicaGrouping",
    "fill_none_group",
    "get_instance_replica_grouping",
    "is_cross_instance",
    "get_ild_size_from_popdist",
    "get_ild_replica_grouping",
    "is_cross_ild",
    "NamedTensors",
    "TensorMap",
    "print_named_tensors",
    "VariableFactory",
    "NamedVariableFactories",
    "add_variable_input",
    "add_replica_sharded_variable_input",
    "host_scalar_tensor_types",
    "cross_entropy",
    "cross_entropy_with_grad",
    "FpDef",
    "float8_143_def",
    "float8_152_def",
    "float8_def",
    "ieee_fp16_denorms",
    "ieee_fp32_no_denorms",
    "fp8_amax_scale",
    "fp8_mse_scale",
    "grad_reduce_square_add",
    "group_quantize_compress_numpy",
    "group_quantize_decompress",
    "group_quantize_decompress_numpy",
    "linear_layout",
    "rotary_pos_embed",
    "trig_table_constants",
    "trig_tables",
    "dense_const_sparse_matmul",
    "random_sparse",
    "AdamOptimizerStep",
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
    "NamedRemoteBuffers",
    "load_remote",
    "store_remote",
    "all_gather_replica_sharded_graph",
    "reduce_replica_sharded_graph",
    "reduce_replica_sharded_tensor",
    "gather_replica_sharded_tensor",
    "replica_sharded_spec",
    "gather_replica_sharded",
    "seed_variable",
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
    "InputStreams",
    "OutputStreams",
    "host_load",
    "host_store",
    "TaskSession",
    "write_variables_pb",
    "NamedTensorData",
    "initialise_memmap_dir_from_checkpoint",
    "ops_of_type",
    "TensorInput",
    "run_module",
    "autodiff",
    "autodiff_with_accumulation",
    "available_memory_proportion",
    "set_available_memory_proportion_by_ipu",
    "set_graph_available_memory_proportion_by_ipu",
    "IO_MODES",
    "BatchSerialResult",
    "RemoteHandle",
    "batch_serial_buffer",
    "batch_serialise",
    "batch_serialise_fwd_and_grad",
    "disable_fc_pass",
    "enable_fc_pass",
    "uses_fc_pass",
    "apply_pre_alias_patterns",
    "patterns_level",
    "PatternsLevel",
    "pipelined_execution",
    "StageContext",
    "Stash",
    "Restore",
    "get_op_pipeline_stage",
    "add_recompute_inputs",
    "recompute_graph",
    "repeat_graph",
    "route_tensor_into_graph",
    "is_subgraph",
    "timer",
    "OrderedDict",
    "WeightsDict",
    "suffix_graph_name",
    "duplicate_items",
    "SerialisationPlan",
    "plan_batch_serialisation",
]
