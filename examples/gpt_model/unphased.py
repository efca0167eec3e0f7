"""The un-phased program: the same model and training step with every weight on the device."""

from __future__ import annotations

from typing import Any

import numpy as np

import popxl
import popxl_addons as addons
from gpt_model.config import Config, Groupings
from gpt_model.layers import GPT
from gpt_model.optimizer import adam_step, global_norm, reduce_and_square
from popxl import ops
from popxl_addons.patterns import apply_pre_alias_patterns


def unphased_program(config: Config) -> tuple[popxl.Ir, dict[str, Any], addons.NamedTensors]:
    """One Session.run = one training step over the whole batch, every weight on the device."""
    ir = popxl.Ir(replication=config.replicas)
    rows = config.batch
    with ir.main_graph, popxl.in_sequence(True):
        tokens = popxl.h2d_stream((rows, config.sequence), popxl.int32, "tokens")
        labels = popxl.h2d_stream((rows * config.sequence,), popxl.int32, "labels")
        loss = popxl.d2h_stream((), popxl.float32, "loss")
        factories, graph = GPT(config).create_graph(tokens.spec, labels.spec)
        weights = factories.init()
        grad = addons.autodiff(graph, grads_required=graph.args.tensors)
        site = graph.bind(weights).call_with_info(ops.host_load(tokens), ops.host_load(labels))
        ops.host_store(loss, site.outputs[0])
        seed = popxl.constant(np.float32(config.loss_scaling))
        outputs = grad.call(seed, args=grad.grad_graph_info.inputs_dict(site))
        names = {id(t): name for name, t in graph.args.to_dict().items()}
        by_name = {names[id(t)]: g for t, g in zip(grad.grad_graph_info.outputs, outputs)}
        by_factory = factories.to_dict()
        norm = global_norm(reduce_and_square(by_name, by_factory, config), Groupings(config).tp)
        for name, w in weights.to_dict().items():
            f = by_factory[name]
            adam, step = adam_step(popxl.TensorSpec(f.shape, f.dtype), f.replica_grouping, config)
            step.bind(adam.init(prefix=f"adam.{name}")).call(w, by_name[name], norm)
    apply_pre_alias_patterns(ir)
    return ir, {"tokens": tokens, "labels": labels, "loss": loss}, weights
