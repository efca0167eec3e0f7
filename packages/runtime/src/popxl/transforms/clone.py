"""Copying a graph, so that a transform can change the copy and leave the original's users alone."""

from __future__ import annotations

from popxl import context
from popxl.graph import Graph, graph_input
from popxl.op import create_op
from popxl.tensor import Constant, Tensor


def clone_graph(graph: Graph, name: str | None = None) -> Graph:
    """A new subgraph with the same inputs, ops and outputs as `graph` (called graphs are shared)."""
    new = graph.ir.create_empty_graph(name or f"{graph.name}_clone")
    mapping: dict[Tensor, Tensor] = {}

    def mapped(t: Tensor) -> Tensor:
        if t not in mapping and isinstance(t, Constant):
            mapping[t] = Constant(new, t.name, t.data, t.dtype)
        return mapping[t]

    with new, context.fresh_name_scopes():
        for t in graph.inputs:
            mapping[t] = graph_input(t.shape, t.dtype, t.name, graph.is_by_ref(t), t.meta_shape)
        for op in graph.ops:
            outs = create_op(op.opdef, [mapped(t) for t in op.inputs], op.attrs, [t.name for t in op.outputs])
            mapping.update(zip(op.outputs, outs))
        for t in graph.outputs:
            new.add_output(mapped(t))
    return new
