"""Wrap a graph's ops in a loop: `repeat_graph(ir.main_graph, n)` runs the whole program n times per run."""

from __future__ import annotations

import dataclasses

import popxl
from popxl import context, ops

__all__ = ["repeat_graph"]


def repeat_graph(graph: popxl.Graph, repeat_count: int) -> popxl.Graph:
    """Move every op of `graph` (the main graph or a subgraph) into a new graph, `repeat_graph`, and put in
    their place one op that runs it `repeat_count` times. `graph` is changed in place; the new graph is
    returned. With `repeat_count` <= 1 nothing changes and `graph` is returned.

    The tensors the moved ops read that no earlier moved op makes (variables, constants, `graph`'s inputs)
    stay in `graph` and become by-reference inputs of the new graph, in the order they are first read, named
    as they are; the ops' outputs keep their names in the new graph. Updates in place (of a variable, say)
    therefore accumulate over the iterations, and each iteration's host loads and stores take the next of
    `ir.num_host_transfers` transfers. The ops keep their order (which is their schedule here), their
    placement and their `in_sequence` links. The new graph has no outputs, so `graph` may not output a
    tensor one of its ops makes; tensors the moved ops made are left in `graph` without a producer that
    runs, as in popxl-addons: use them only inside the new graph.
    """
    if repeat_count <= 1:
        return graph
    moved = list(graph.ops)
    produced = {id(t) for op in moved for t in op.outputs}
    made_outputs = [t for t in graph.outputs if id(t) in produced]
    if made_outputs:
        raise ValueError(
            f"repeat_graph cannot loop {graph.id!r}: its output {made_outputs[0].id} is made by one of its ops, "
            "and the loop has no outputs"
        )

    body = graph.ir.create_empty_graph("repeat_graph")
    old_to_new: dict[popxl.Tensor, popxl.Tensor] = {}
    inputs: dict[popxl.Tensor, popxl.Tensor] = {}  # body input -> the tensor of `graph` that feeds it
    with body, context.fresh_name_scopes():
        for op in moved:
            for t in op.inputs:
                if t not in old_to_new:
                    new_in = popxl.graph_input(t.shape, t.dtype, t.name, by_ref=True, meta_shape=t.meta_shape)
                    old_to_new[t] = new_in
                    inputs[new_in] = t
            clone = body.add_op(op.opdef, [old_to_new[t] for t in op.inputs], op.attrs, [t.name for t in op.outputs])
            # Same order, so the creation index an op is sequenced after is the same in the new graph.
            clone.placement = dataclasses.replace(op.placement)
            old_to_new.update(zip(op.outputs, clone.outputs, strict=True))

    graph.remove_ops(moved)
    with graph, popxl.in_sequence("pass"):
        ops.repeat_with_info(body, repeat_count, inputs_dict=inputs)
    return body
