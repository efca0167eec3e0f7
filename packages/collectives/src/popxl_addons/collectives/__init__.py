"""popxl-addons collectives: tensor-parallel all-reduces with special gradients."""

from popxl_addons.collectives.all_reduce_tp import (
    PatternNotAppliedError,
    replicated_all_reduce,
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)

__all__ = [
    "PatternNotAppliedError",
    "replicated_all_reduce",
    "replicated_all_reduce_identical_grad_inputs",
    "replicated_all_reduce_identical_inputs",
]
