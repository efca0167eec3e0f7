# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.replicated_all_reduce_TP`, re-exporting its sub-modules' names."""

from popxl_addons.ops.replicated_all_reduce_TP.replicated_all_reduce_TP import (
    replicated_all_reduce,
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)

__all__ = [
    "replicated_all_reduce_identical_inputs",
    "replicated_all_reduce_identical_grad_inputs",
    "replicated_all_reduce",
]
