"""The phased program: one training step, stage by stage, its decoder layers' phases looped over the layers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import popxl
from gpt_model.config import Config
from gpt_model.layers import DecoderLayer, Embeddings, Head
from gpt_model.optimizer import global_norm
from gpt_model.stage import Stage, build_stage
from popxl import ops
from popxl_addons.patterns import apply_pre_alias_patterns
from popxl_addons.transforms.batch_serialisation import RemoteHandle, batch_serial_buffer


def over_layers(body: Callable[..., Any], layers: int, first: int, *inputs: popxl.Tensor) -> tuple[popxl.Tensor, ...]:
    """`body(row, *inputs)` for `layers` rows from `first`, as one `ops.repeat` of one graph; its outputs after the
    loop, less the row.

    `body` returns the next row, then the new values of the first inputs it carries to the next layer. The
    program holds the layer's phase once whatever the number of layers, so it compiles in the same time; the
    row, a tensor, picks each layer's entry of the remote buffers.
    """
    row = popxl.constant(np.int32(first), popxl.int32, "layer")
    graph = popxl.gir().create_graph(body, row, *inputs)
    return ops.repeat(graph, layers, row, *inputs)[1:]


def phased_program(config: Config) -> tuple[popxl.Ir, dict[str, Any], list[Stage]]:
    """One Session.run = one training step, phase by phase."""
    ir = popxl.Ir(replication=config.replicas)
    ir.session_options.numIOTiles = 32
    steps, micro, seq, width = config.steps, config.micro, config.sequence, config.width
    with ir.main_graph, popxl.in_sequence(True):
        tokens = popxl.h2d_stream((micro, seq), popxl.int32, "tokens")
        labels = popxl.h2d_stream((micro * seq,), popxl.int32, "labels")
        loss = popxl.d2h_stream((), popxl.float32, "loss")
        act = popxl.TensorSpec((micro, seq, width), config.dtype)
        # Row r of the boundary buffers holds what enters layer r (row `layers` enters the head).
        acts = batch_serial_buffer(act, steps, rows=config.layers + 1)
        grads = batch_serial_buffer(act, steps, rows=config.layers + 1)
        seeds = batch_serial_buffer(popxl.TensorSpec((), popxl.float32), steps)
        for j in range(steps):
            ops.remote_store(seeds, j, popxl.constant(np.float32(config.loss_scaling)))
        embed = build_stage(
            Embeddings(config), [tokens.spec], 1, config,
            inputs=[tokens], outputs=[RemoteHandle(acts, 0)], output_gradients=[RemoteHandle(grads, 0)],
        )  # fmt: skip
        layer = build_stage(
            DecoderLayer(config), [act], config.layers, config,
            inputs=[RemoteHandle(acts, 0)], outputs=[RemoteHandle(acts, 1)],
            output_gradients=[RemoteHandle(grads, 1)], input_gradient=RemoteHandle(grads, 0),
        )  # fmt: skip
        head = build_stage(
            Head(config), [act, labels.spec], 1, config,
            inputs=[RemoteHandle(acts, config.layers), labels], outputs=[loss],
            output_gradients=[RemoteHandle(seeds, 0)], input_gradient=RemoteHandle(grads, config.layers),
        )  # fmt: skip
        embed.forward_phase(0)

        def forward(row: popxl.Tensor) -> popxl.Tensor:
            layer.forward_phase(row)
            return row + 1

        over_layers(forward, config.layers, 0)
        head.forward_phase(0)
        total = head.backward_phase(0, config)

        def backward(row: popxl.Tensor, total: popxl.Tensor) -> tuple[popxl.Tensor, popxl.Tensor]:
            return row - 1, total + layer.backward_phase(row, config)

        (total,) = over_layers(backward, config.layers, config.layers - 1, total)
        total = total + embed.backward_phase(0, config)
        norm = global_norm(total, ir.replica_grouping())  # each replica holds a disjoint part of the square
        embed.optimizer_phase(0, norm)

        def optimizer(row: popxl.Tensor, norm: popxl.Tensor) -> popxl.Tensor:
            layer.optimizer_phase(row, norm)
            return row + 1

        over_layers(optimizer, config.layers, 0, norm)
        head.optimizer_phase(0, norm)
    ir.num_host_transfers = steps
    apply_pre_alias_patterns(ir)
    return ir, {"tokens": tokens, "labels": labels, "loss": loss}, [embed, layer, head]


def phased_variable(stages: Sequence[Stage], name: str) -> popxl.Variable:
    """The phased program's variable holding the un-phased weight `name`."""
    first, _, rest = name.partition(".")
    if first == "embeddings":
        return stages[0].variables[0].get(rest)  # type: ignore[no-any-return]
    if first == "head":
        return stages[2].variables[0].get(rest)  # type: ignore[no-any-return]
    return stages[1].variables[int(first.removeprefix("layer"))].get(rest)  # type: ignore[no-any-return]
