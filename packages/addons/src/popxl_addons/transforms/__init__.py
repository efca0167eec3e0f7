# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.transforms`, re-exporting its sub-modules' names."""

from popxl_addons.transforms import (
    available_memory_proportion,
    batch_serialisation,
    pipelining,
    recomputation,
    use_fc_pass,
)
from popxl_addons.transforms.autodiff import autodiff, autodiff_with_accumulation
from popxl_addons.transforms.available_memory_proportion import (
    set_available_memory_proportion_by_ipu,
    set_graph_available_memory_proportion_by_ipu,
)
from popxl_addons.transforms.batch_serialisation import (
    RemoteHandle,
    batch_serial_buffer,
    batch_serialise,
    batch_serialise_fwd_and_grad,
)
from popxl_addons.transforms.pipelining import pipelined_execution
from popxl_addons.transforms.recomputation import add_recompute_inputs, recompute_graph
from popxl_addons.transforms.use_fc_pass import disable_fc_pass, enable_fc_pass

__all__ = [
    "available_memory_proportion",
    "batch_serialisation",
    "pipelining",
    "recomputation",
    "use_fc_pass",
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
]
