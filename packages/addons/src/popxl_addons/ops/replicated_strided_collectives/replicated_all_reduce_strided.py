# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.replicated_strided_collectives.replicated_all_reduce_strided`, re-exporting the names
of `popxl_addons.collectives.strided`."""

from popxl_addons.collectives.strided import (
    replicated_all_reduce_strided,
    replicated_all_reduce_strided_graph,
    replicated_all_reduce_strided_identical_grad_inputs,
    replicated_all_reduce_strided_identical_inputs,
)

__all__ = [
    "replicated_all_reduce_strided",
    "replicated_all_reduce_strided_identical_inputs",
    "replicated_all_reduce_strided_identical_grad_inputs",
    "replicated_all_reduce_strided_graph",
]
