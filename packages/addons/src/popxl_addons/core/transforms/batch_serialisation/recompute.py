"""A gradient graph that recomputes some of its activations from the forward inputs."""

from __future__ import annotations

from collections.abc import Collection

import popxl
from popxl.transforms import ExpectedConnectionType, GradGraphInfo
from popxl_addons.core.modules.graph import BoundGraph, GraphWithNamedArgs
from popxl_addons.core.transforms.recomputation import add_recompute_inputs

Fwd = ExpectedConnectionType.Fwd


def recompute_activations(
    grad_graph: GraphWithNamedArgs, recomputed: Collection[popxl.Tensor]
) -> tuple[GraphWithNamedArgs, dict[popxl.Tensor, popxl.Tensor]]:
    """`grad_graph` wrapped to recompute the forward tensors `recomputed`, and where its tensors went.

    As `recompute_graph` with every activation not in `recomputed` still an
    input: the new graph's inputs are those of `add_recompute_inputs`, then the
    stored activations, then the rest (by reference as before). The forward
    graph is called whole; what only stored activations need is left for XLA
    to remove. The map takes each old input and output to the new graph's.
    """
    info = grad_graph.grad_graph_info
    forward = info.forward_graph
    graph = grad_graph.graph
    wrapper = graph.ir.create_empty_graph(f"{graph.name}_recomp")
    pairs = [(t, ec) for t, ec in zip(graph.inputs, info.expected_inputs) if ec.connection_type is Fwd]
    with wrapper:
        fwd_feeds, feeds, expected = add_recompute_inputs(info)
        for t, ec in pairs:
            if ec.fwd_tensor in forward.inputs:
                feeds[t] = fwd_feeds[ec.fwd_tensor]
            elif ec.fwd_tensor not in recomputed:
                feeds[t] = popxl.graph_input(t.shape, t.dtype, t.name, meta_shape=t.meta_shape)
                expected.append(ec)
        site = BoundGraph(forward, fwd_feeds).call_with_info()
        for t, ec in pairs:
            if ec.fwd_tensor in recomputed:
                feeds[t] = site.graph_to_parent(ec.fwd_tensor)
        inputs = {t: v for t, v in feeds.items() if v in wrapper.inputs}
        for t in sorted((t for t in graph.inputs if t not in feeds), key=lambda t: t.name):
            feeds[t] = inputs[t] = popxl.graph_input(t.shape, t.dtype, t.name, graph.is_by_ref(t), t.meta_shape)
        outputs = BoundGraph(graph, feeds).call_with_info().outputs
        for out in outputs:
            popxl.graph_output(out)
    new_info = GradGraphInfo.create(wrapper, forward, expected, list(info.expected_outputs))
    remap = {**inputs, **dict(zip(graph.outputs, wrapper.outputs))}
    return GraphWithNamedArgs(wrapper, grad_graph.args.remap(inputs), new_info), remap
