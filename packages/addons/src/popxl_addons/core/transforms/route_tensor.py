"""popxl-addons' `route_tensor_into_graph`: reach a tensor of an enclosing graph from a graph it calls, directly or
through other graphs, by adding the inputs that carry it along every call path."""

from __future__ import annotations

import popxl

__all__ = ["route_tensor_into_graph", "is_subgraph"]


def is_subgraph(parent: popxl.Graph, subgraph: popxl.Graph) -> bool:
    """Whether `subgraph` is `parent` or a graph `parent` runs, directly or not."""
    seen: set[int] = set()
    todo = [parent]
    while todo:
        g = todo.pop()
        if g is subgraph:
            return True
        if id(g) not in seen:
            seen.add(id(g))
            todo.extend(g.called_graphs)
    return False


def route_tensor_into_graph(
    tensor: popxl.Tensor, graph: popxl.Graph | None = None, modified: bool = False
) -> popxl.Tensor:
    """`tensor`, of a graph that runs `graph` (the current graph by default), as a tensor of `graph`.

    Every graph on every call path from `tensor`'s graph to `graph` gets an input
    for it, fed at each of its calls and loops; with `modified`, those inputs are
    by reference, so that in-place updates in `graph` reach `tensor`. A graph
    that already takes it at every call keeps that input.
    """
    graph = graph if graph is not None else popxl.gcg()
    if tensor.graph is graph:
        return tensor
    if not is_subgraph(tensor.graph, graph):
        raise ValueError(
            f"{tensor} is not in the graph {graph.id!r}. Additionally, the tensor is not in a known parent graph "
            "so cannot be moved into the graph."
        )
    routed: dict[popxl.Graph, popxl.Tensor] = {tensor.graph: tensor}

    def into(g: popxl.Graph) -> popxl.Tensor:
        if g in routed:
            return routed[g]
        sites = [s for s in g.call_sites if is_subgraph(tensor.graph, s.graph)]
        if len(sites) != len(g.call_sites):
            outside = next(s for s in g.call_sites if s not in sites)
            raise ValueError(f"Cannot route {tensor} into {g.id!r}: {outside} runs it from outside {tensor.graph.id!r}")
        parents = {id(s): into(s.graph) for s in sites}
        fed = _input_fed_everywhere(g, sites, parents)
        if fed is None or (modified and not g.is_by_ref(fed)):
            name = tensor.name.split("/")[-1]
            fed = g.add_input_from_callers(name, tensor.spec, lambda s: parents[id(s)], by_ref=modified)
        routed[g] = fed
        return fed

    return into(graph)


def _input_fed_everywhere(
    g: popxl.Graph, sites: list[popxl.op.Op], parents: dict[int, popxl.Tensor]
) -> popxl.Tensor | None:
    """A graph input that every call site already feeds with its routed parent tensor, if there is one."""
    for i, t in enumerate(g.inputs):
        if all(i < len(s.inputs) and s.inputs[i] is parents[id(s)] for s in sites):
            return t
    return None
