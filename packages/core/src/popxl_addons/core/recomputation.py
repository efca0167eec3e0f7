"""Recomputation: a gradient graph that runs its forward graph again instead of receiving its activations."""

from __future__ import annotations

import popxl
from popxl.transforms import ExpectedConnection, ExpectedConnectionType, GradGraphInfo
from popxl_addons.core.graph import BoundGraph, GraphWithNamedArgs


def recompute_graph(grad_graph: GraphWithNamedArgs) -> GraphWithNamedArgs:
    """`grad_graph` wrapped so that it recomputes the forward activations it needs from the forward inputs.

    The new graph's inputs are the output gradients, then the forward inputs
    (those the gradient graph already took first, then the rest by name), then
    the gradient graph's other inputs (accumulators stay by reference). Its
    expected inputs say so; its outputs are the gradient graph's.
    """
    info = grad_graph.grad_graph_info
    forward = info.forward_graph
    ir = grad_graph.graph.ir
    recomputing = ir.create_empty_graph(f"{grad_graph.graph.name}_recomp")
    with recomputing:
        fwd_inputs: dict[popxl.Tensor, popxl.Tensor] = {}
        grad_inputs: dict[popxl.Tensor, popxl.Tensor] = {}
        expected: list[ExpectedConnection] = []
        for t, ec in zip(info.graph.inputs, info.expected_inputs):
            if ec.connection_type is ExpectedConnectionType.FwdGrad:
                grad_inputs[t] = popxl.graph_input(t.shape, t.dtype, t.name, meta_shape=t.meta_shape)
                expected.append(ec)
            elif ec.fwd_tensor in forward.inputs:
                f = ec.fwd_tensor
                fwd_inputs[f] = popxl.graph_input(f.shape, f.dtype, f.name, meta_shape=f.meta_shape)
                expected.append(ec)
        for f in sorted((f for f in forward.inputs if f not in fwd_inputs), key=lambda f: f.name):
            fwd_inputs[f] = popxl.graph_input(f.shape, f.dtype, f.name, meta_shape=f.meta_shape)
            expected.append(ExpectedConnection._create(f, ExpectedConnectionType.Fwd))
        site = BoundGraph(forward, fwd_inputs).call_with_info()
        grad_inputs.update(info.inputs_dict(site))
        graph = grad_graph.graph
        for t in sorted((t for t in graph.inputs if t not in grad_inputs), key=lambda t: t.name):
            grad_inputs[t] = popxl.graph_input(t.shape, t.dtype, t.name, graph.is_by_ref(t), t.meta_shape)
        for out in BoundGraph(graph, grad_inputs).call_with_info().outputs:
            popxl.graph_output(out)
    new_info = GradGraphInfo._create(recomputing, forward, expected, list(info.expected_outputs))
    return GraphWithNamedArgs(recomputing, grad_graph.args.remap(grad_inputs), new_info)
