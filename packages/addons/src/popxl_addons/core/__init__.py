"""popxl-addons core: modules, named tensors, autodiff with accumulation and batch serialisation.

Its names, from the sub-packages that hold them by what they do (modules, transforms, ops, remote,
session, training, planning: the table in packages/addons/README.md).
"""

from popxl_addons.core import transforms
from popxl_addons.core.debugging import print_tensor, print_text
from popxl_addons.core.modules.dot_tree import DotTree, to_mapping
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

# popxl-addons' fused ops (popxl_addons.ops.*)
from popxl_addons.core.ops.cross_entropy import cross_entropy, cross_entropy_with_grad
from popxl_addons.core.ops.fp8_formats import (
    FpDef,
    float8_143_def,
    float8_152_def,
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
from popxl_addons.core.transforms.pipelining import pipelined_execution
from popxl_addons.core.transforms.recomputation import add_recompute_inputs, recompute_graph
from popxl_addons.core.transforms.repeat_graph import repeat_graph
from popxl_addons.core.transforms.route_tensor import is_subgraph, route_tensor_into_graph
from popxl_addons.core.utils import OrderedDict, WeightsDict, duplicate_items, suffix_graph_name, timer

__all__ = [
    "host_scalar_tensor_types",
    "print_tensor",
    "print_text",
    "to_mapping",
    "disable_fc_pass",
    "enable_fc_pass",
    "uses_fc_pass",
    "GradGraphBuilder",
    "argument_hash",
    "bound_arguments",
    "function",
    "get_function_hash",
    "tensor_hash",
    "CalledGraphsGradInfo",
    "CalledGraphsGradInfoLike",
    "GradGraphInfoLike",
    "GraphLike",
    "NameScopeMeta",
    "create_grad_graph_info",
    "TensorMap",
    "print_named_tensors",
    "PatternsLevel",
    "patterns_level",
    "add_recompute_inputs",
    "available_memory_proportion",
    "set_available_memory_proportion_by_ipu",
    "set_graph_available_memory_proportion_by_ipu",
    "fill_none_group",
    "get_ild_replica_grouping",
    "get_ild_size_from_popdist",
    "get_instance_replica_grouping",
    "is_cross_ild",
    "is_cross_instance",
    "evaluate_FLOPs",
    "evaluate_ir_FLOPs",
    "format_flops_scientific",
    "plan_batch_serialisation",
    "print_FLOPs",
    "total_FLOPs",
    "repeat_graph",
    "TensorInput",
    "ops_of_type",
    "run_module",
    "OrderedDict",
    "WeightsDict",
    "duplicate_items",
    "suffix_graph_name",
    "timer",
    "is_subgraph",
    "route_tensor_into_graph",
    "NamedTensorData",
    "TaskSession",
    "initialise_memmap_dir_from_checkpoint",
    "write_variables_pb",
    "transforms",
    "GraphCache",
    "pipelined_execution",
    "recompute_graph",
    "AdamOptimizerStep",
    "BatchSerialResult",
    "BoundGraph",
    "DotTree",
    "GraphWithNamedArgs",
    "IO_MODES",
    "InputStreams",
    "Module",
    "NamedRemoteBuffers",
    "NamedReplicaGrouping",
    "NamedTensors",
    "NamedVariableFactories",
    "OutputStreams",
    "RemoteHandle",
    "SerialisationPlan",
    "VariableFactory",
    "add_replica_sharded_variable_input",
    "add_variable_input",
    "all_gather_replica_sharded_graph",
    "apply_pre_alias_patterns",
    "autodiff",
    "autodiff_with_accumulation",
    "batch_serial_buffer",
    "batch_serialise",
    "batch_serialise_fwd_and_grad",
    "create_remote_buffer",
    "gather_replica_sharded",
    "gather_replica_sharded_tensor",
    "handle_negative_axis",
    "host_load",
    "host_store",
    "load_remote",
    "load_remote_graph",
    "named_buffers",
    "named_variable_buffers",
    "pad_axis",
    "reduce_replica_sharded_graph",
    "reduce_replica_sharded_tensor",
    "repeat",
    "repeat_axis",
    "repeat_shard",
    "replica_sharded_spec",
    "seed_variable",
    "shard",
    "shard2D",
    "split2D",
    "squeeze_safe",
    "store_remote",
    "store_remote_graph",
    "tensor_parallel_input",
    "tensor_parallel_output",
    "unshard",
    "unshard2D",
    "unshard_arrays",
    # popxl-addons' fused ops
    "cross_entropy",
    "cross_entropy_with_grad",
    "dense_const_sparse_matmul",
    "FpDef",
    "float8_143_def",
    "float8_152_def",
    "fp8_amax_scale",
    "fp8_mse_scale",
    "ieee_fp16_denorms",
    "ieee_fp32_no_denorms",
    "grad_reduce_square_add",
    "group_quantize_compress_numpy",
    "group_quantize_decompress",
    "group_quantize_decompress_numpy",
    "linear_layout",
    "random_sparse",
    "rotary_pos_embed",
    "trig_table_constants",
    "trig_tables",
]
