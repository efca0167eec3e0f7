"""Recomputation: a gradient graph that runs its forward graph again instead of receiving its activations."""

from __future__ import annotations

import popxl
from popxl.transforms import ExpectedConnection, ExpectedConnectionType, GradGraphInfo
from popxl_addons.core.modules.graph import BoundGraph, GraphWithNamedArgs

__all__ = ["add_recompute_inputs", "recompute_graph"]


def add_recompute_inputs(
    grad_info: GradGraphInfo,
) -> tuple[dict[popxl.Tensor, popxl.Tensor], dict[popxl.Tensor, popxl.Tensor], list[ExpectedConnection]]:
    """Inputs of the current graph for recomputing `grad_info`'s gradient graph: one per output gradient the
    gradient graph takes, one per forward input it takes, then one per other forward input (by name).

    Returns the forward inputs and the gradient graph's inputs, each mapped to its new input, and the new
    inputs' expected connections in order, as popxl-addons does.
    """
    forward = grad_info.forward_graph
    fwd_inputs: dict[popxl.Tensor, popxl.Tensor] = {}
    grad_inputs: dict[popxl.Tensor, popxl.Tensor] = {}
    expected: list[ExpectedConnection] = []
    for t, ec in zip(grad_info.graph.inputs, grad_info.expected_inputs):
        if ec.connection_type is ExpectedConnectionType.FwdGrad:
            grad_inputs[t] = popxl.graph_input(t.shape, t.dtype, t.name, meta_shape=t.meta_shape)
            expected.append(ec)
        elif ec.fwd_tensor in forward.inputs:
            f = ec.fwd_tensor
            fwd_inputs[f] = popxl.graph_input(f.shape, f.dtype, f.name, meta_shape=f.meta_shape)
            expected.append(ec)
    for f in sorted((f for f in forward.inputs if f not in fwd_inputs), key=lambda f: f.name):
        fwd_inputs[f] = popxl.graph_input(f.shape, f.dtype, f.name, meta_shape=f.meta_shape)
        expected.append(ExpectedConnection.create(f, ExpectedConnectionType.Fwd))
    return fwd_inputs, grad_inputs, expected


def recompute_graph(grad_graph: GraphWithNamedArgs) -> GraphWithNamedArgs:
    """`grad_graph` wrapped so that it recomputes the forward activations it needs from the forward inputs.

    The new graph's inputs are those of `add_recompute_inputs`, then the
    gradient graph's other inputs (accumulators stay by reference). Its
    expected inputs say so; its outputs are the gradient graph's.
    """
    info = grad_graph.grad_graph_info
    recomputing = grad_graph.graph.ir.create_empty_graph(f"{grad_graph.graph.name}_recomp")
    with recomputing:
        fwd_inputs, grad_inputs, expected = add_recompute_inputs(info)
        site = BoundGraph(info.forward_graph, fwd_inputs).call_with_info()
        grad_inputs.update(info.inputs_dict(site))
        graph = grad_graph.graph
        for t in sorted((t for t in graph.inputs if t not in grad_inputs), key=lambda t: t.name):
            grad_inputs[t] = popxl.graph_input(t.shape, t.dtype, t.name, graph.is_by_ref(t), t.meta_shape)
        for out in BoundGraph(graph, grad_inputs).call_with_info().outputs:
            popxl.graph_output(out)
    new_info = GradGraphInfo.create(recomputing, info.forward_graph, expected, info.expected_outputs)
    return GraphWithNamedArgs(recomputing, grad_graph.args.remap(grad_inputs), new_info)
