# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.replicated_strided_collectives`, re-exporting its sub-modules' names."""

from popxl_addons.ops.replicated_strided_collectives.replicated_all_gather_strided import replicated_all_gather_strided
from popxl_addons.ops.replicated_strided_collectives.replicated_all_reduce_strided import (
    replicated_all_reduce_strided,
    replicated_all_reduce_strided_graph,
    replicated_all_reduce_strided_identical_grad_inputs,
    replicated_all_reduce_strided_identical_inputs,
)
from popxl_addons.ops.replicated_strided_collectives.replicated_reduce_scatter_strided import (
    replicated_reduce_scatter_strided,
)

__all__ = [
    "replicated_all_gather_strided",
    "replicated_all_reduce_strided",
    "replicated_all_reduce_strided_identical_inputs",
    "replicated_all_reduce_strided_identical_grad_inputs",
    "replicated_all_reduce_strided_graph",
    "replicated_reduce_scatter_strided",
]
