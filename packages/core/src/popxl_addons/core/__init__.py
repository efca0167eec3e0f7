"""popxl-addons core: modules, named tensors, autodiff with accumulation and batch serialisation."""

from popxl_addons.core.autodiff import autodiff, autodiff_with_accumulation
from popxl_addons.core.batch_serialisation import (
    IO_MODES,
    BatchSerialResult,
    RemoteHandle,
    batch_serial_buffer,
    batch_serialise,
    batch_serialise_fwd_and_grad,
)
from popxl_addons.core.dot_tree import DotTree
from popxl_addons.core.graph import BoundGraph, GraphWithNamedArgs
from popxl_addons.core.module import Module
from popxl_addons.core.named_tensors import NamedTensors
from popxl_addons.core.patterns import apply_pre_alias_patterns
from popxl_addons.core.remote import create_remote_buffer, gather_replica_sharded, replica_sharded_spec
from popxl_addons.core.variable_factory import NamedVariableFactories, VariableFactory, add_variable_input

__all__ = [
    "IO_MODES",
    "BatchSerialResult",
    "BoundGraph",
    "DotTree",
    "GraphWithNamedArgs",
    "Module",
    "NamedTensors",
    "NamedVariableFactories",
    "RemoteHandle",
    "VariableFactory",
    "add_variable_input",
    "apply_pre_alias_patterns",
    "autodiff",
    "autodiff_with_accumulation",
    "batch_serial_buffer",
    "batch_serialise",
    "batch_serialise_fwd_and_grad",
    "create_remote_buffer",
    "gather_replica_sharded",
    "replica_sharded_spec",
]
