"""popxl's `decompose_sum`: sums of more than two gradients as a chain of additions."""

from __future__ import annotations

from popxl.graph import Graph


def decompose_sum(graph: Graph) -> Graph:
    """`graph`, whose sums of more than two inputs are chains of two-input additions; returned as it is.

    popart's autodiff sums a tensor's gradient contributions with one many-input
    sum, which this transform splits so that each contribution can be freed as
    soon as it is added. This runtime's autodiff already adds each contribution
    as it is produced, and no op kind sums more than two tensors, so every graph
    is in that form already.
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"decompose_sum takes a popxl.Graph, got {graph!r}")
    return graph
