"""Transforms: functions from graphs to graphs (or that rewrite a graph's ops), one module each; here, all of them.

A new transform is a module of this package, its function added below; `popxl_addons.transforms` offers
popxl-addons' names of them through the shells of `popxl_addons/_paths.py`.
"""

from popxl_addons.core.transforms.autodiff import autodiff, autodiff_with_accumulation
from popxl_addons.core.transforms.available_memory import (
    set_available_memory_proportion_by_ipu,
    set_graph_available_memory_proportion_by_ipu,
)
from popxl_addons.core.transforms.batch_serialisation import batch_serialise, batch_serialise_fwd_and_grad
from popxl_addons.core.transforms.fc_pass import disable_fc_pass, enable_fc_pass
from popxl_addons.core.transforms.patterns import apply_pre_alias_patterns
from popxl_addons.core.transforms.pipelining import pipelined_execution
from popxl_addons.core.transforms.recomputation import add_recompute_inputs, recompute_graph
from popxl_addons.core.transforms.repeat_graph import repeat_graph
from popxl_addons.core.transforms.route_tensor import route_tensor_into_graph

__all__ = [
    "add_recompute_inputs",
    "apply_pre_alias_patterns",
    "autodiff",
    "autodiff_with_accumulation",
    "batch_serialise",
    "batch_serialise_fwd_and_grad",
    "disable_fc_pass",
    "enable_fc_pass",
    "pipelined_execution",
    "recompute_graph",
    "repeat_graph",
    "route_tensor_into_graph",
    "set_available_memory_proportion_by_ipu",
    "set_graph_available_memory_proportion_by_ipu",
]
