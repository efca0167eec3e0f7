# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.collectives`: tensor-parallel all-reduces with special gradients, strided collectives,
the layer norm of a sharded hidden axis, and the cross entropy of logits whose classes are sharded."""

from popxl_addons.collectives.all_reduce_tp import (
    PatternNotAppliedError,
    replicated_all_reduce,
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from popxl_addons.collectives.cross_entropy_sharded import cross_entropy_sharded_loss, cross_entropy_sharded_wr_loss
from popxl_addons.collectives.layer_norm_distributed import layer_norm_distributed
from popxl_addons.collectives.layer_norm_distributed_layer import LayerNormDistributed
from popxl_addons.collectives.strided import (
    replicated_all_gather_strided,
    replicated_all_reduce_strided,
    replicated_all_reduce_strided_graph,
    replicated_all_reduce_strided_identical_grad_inputs,
    replicated_all_reduce_strided_identical_inputs,
    replicated_reduce_scatter_strided,
)

__all__ = [
    "PatternNotAppliedError",
    "replicated_all_reduce_identical_inputs",
    "replicated_all_reduce_identical_grad_inputs",
    "replicated_all_reduce",
    "cross_entropy_sharded_loss",
    "cross_entropy_sharded_wr_loss",
    "layer_norm_distributed",
    "LayerNormDistributed",
    "replicated_all_gather_strided",
    "replicated_all_reduce_strided",
    "replicated_all_reduce_strided_identical_inputs",
    "replicated_all_reduce_strided_identical_grad_inputs",
    "replicated_all_reduce_strided_graph",
    "replicated_reduce_scatter_strided",
]
