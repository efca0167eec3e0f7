"""popxl on XLA: Graphcore's popxl programming model, compiled through JAX.

Programs written against popxl (graphs, calls, loops, host streams, remote
buffers, replicas and autodiff) run unchanged on CPUs and GPUs.
"""

import popxl.opdefs  # noqa: F401  (registers the built-in op kinds)
from popxl import cpp_custom_ops as _cpp_custom_ops
from popxl import dtypes, fp8_utils, ops, transforms, utils
from popxl import tensor as _tensor
from popxl.context import (
    gcg,
    get_current_graph,
    get_ir,
    get_main_graph,
    gir,
    gmg,
    in_sequence,
    io_tiles,
    ipu,
    name_scope,
)
from popxl.creation import (
    constant,
    remote_replica_sharded_variable,
    remote_variable,
    replica_sharded_variable,
    variable,
)
from popxl.dtypes import (
    bfloat16,
    bool_,
    complex64,
    complex128,
    double,
    dtype,
    float,
    float8_143,
    float8_152,
    float16,
    float32,
    float64,
    half,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from popxl.errors import OutOfMemoryError, OutOfRangeError
from popxl.graph import Graph, graph_input, graph_output
from popxl.host_layout import HostLayout
from popxl.ir import Ir
from popxl.module import Module
from popxl.random_seed import create_seeds, two_uint32_to_uint64, uint64_to_two_uint32
from popxl.remote_buffer import RemoteBuffer, remote_buffer, replica_sharded_buffer
from popxl.replica_grouping import ReplicaGrouping
from popxl.session import Session
from popxl.streams import DeviceToHostStream, HostToDeviceStream, d2h_stream, h2d_stream
from popxl.tensor import Constant, LoadedVariable, RemoteVariable, Tensor, TensorByRef, TensorSpec, Variable
from popxl.tensorlocation import ExecutionContext, ReplicatedTensorSharding, TensorLocation, TensorStorage, TileSet

bool = bool_

# popxl defines its tensor-creating functions in `popxl.tensor`, which sits below them here (see its docstring).
vars(_tensor).update(
    {
        f.__name__: f
        for f in (
            constant,
            graph_input,
            graph_output,
            remote_replica_sharded_variable,
            remote_variable,
            replica_sharded_buffer,
            replica_sharded_variable,
            variable,
        )
    }
)

# A C++ custom op's `import cppimport.import_hook` then fails saying why it cannot run here.
_cpp_custom_ops.install()

__all__ = [
    "fp8_utils",
    "utils",
    "TileSet",
    "TensorStorage",
    "TensorLocation",
    "ReplicatedTensorSharding",
    "ExecutionContext",
    "uint64",
    "int64",
    "float64",
    "float8_152",
    "float8_143",
    "double",
    "complex128",
    "complex64",
    "Constant",
    "OutOfMemoryError",
    "OutOfRangeError",
    "DeviceToHostStream",
    "Graph",
    "HostLayout",
    "HostToDeviceStream",
    "Ir",
    "Module",
    "RemoteBuffer",
    "RemoteVariable",
    "ReplicaGrouping",
    "Session",
    "Tensor",
    "TensorByRef",
    "TensorSpec",
    "Variable",
    "LoadedVariable",
    "bfloat16",
    "bool",
    "bool_",
    "constant",
    "create_seeds",
    "d2h_stream",
    "dtype",
    "dtypes",
    "float",
    "float16",
    "float32",
    "gcg",
    "get_current_graph",
    "get_ir",
    "get_main_graph",
    "gir",
    "gmg",
    "graph_input",
    "graph_output",
    "h2d_stream",
    "half",
    "in_sequence",
    "int8",
    "int16",
    "int32",
    "io_tiles",
    "ipu",
    "name_scope",
    "ops",
    "remote_buffer",
    "remote_replica_sharded_variable",
    "remote_variable",
    "replica_sharded_buffer",
    "replica_sharded_variable",
    "transforms",
    "two_uint32_to_uint64",
    "uint8",
    "uint16",
    "uint32",
    "uint64_to_two_uint32",
    "variable",
]
