"""The optimizer's parts both programs share: gradient norms and the clipped Adam step of one weight."""

from __future__ import annotations

from typing import Any

import numpy as np

import popxl
import popxl_addons as addons
from gpt_model.config import Config, Groupings
from popxl import ops
from popxl_addons.ops.grad_reduce_square_add import grad_reduce_square_add


def tp_sharded(factory: addons.VariableFactory) -> bool:
    """Whether the tensor-parallel replicas hold different parts of this weight."""
    return bool(factory.replica_grouping.num_groups > 1)


def reduce_and_square(
    grads: dict[str, popxl.Tensor], factories: dict[str, addons.VariableFactory], config: Config
) -> popxl.Tensor:
    """All-reduce each gradient over the data-parallel replicas in place; this replica's part of the squared norm.

    A weight the tensor-parallel replicas share counts 1/tp on each, so that summing over them counts it once.
    """
    groups = Groupings(config)
    total: popxl.Tensor = popxl.constant(np.float32(0.0))
    for name, grad in grads.items():
        ops.collectives.replicated_all_reduce_(grad, "add", group=groups.dp)
        square = grad_reduce_square_add(grad, loss_scaling=config.loss_scaling * config.dp)
        total = total + (square if tp_sharded(factories[name]) else square * (1 / config.tp))
    return total


def global_norm(total: popxl.Tensor, group: popxl.ReplicaGrouping) -> popxl.Tensor:
    """The gradient norm from each replica's part of its square, summed over `group`."""
    return ops.sqrt(ops.collectives.replicated_all_reduce(total, "add", group=group))


def adam_step(
    var: popxl.TensorSpec, grouping: popxl.ReplicaGrouping, config: Config
) -> tuple[addons.NamedVariableFactories, Any]:
    """The Adam step graph of one weight or shard of it: the loss scale and the sum over data-parallel
    replicas divided out. A shard (`var` with a meta shape) gets moments sharded alike."""
    state, graph = addons.optimizers.adam.AdamOptimizerStep().create_graph(
        var,
        var,
        grouping,
        lr=config.lr,
        weight_decay=0.0,
        first_order_dtype=config.dtype,
        loss_scaling=config.loss_scaling * config.dp,
        global_norm=popxl.TensorSpec((), popxl.float32),
        global_norm_max=config.clip,
    )
    return state, graph
