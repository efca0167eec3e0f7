"""What popxl-addons accepts for a graph and for its gradient graph (`popxl_addons.graph_common`).

popxl-addons spells a graph as a `popxl.Graph`, a `GraphWithNamedArgs` or a
`BoundGraph`, and a gradient graph as a `GradGraphInfo` or the `GraphWithNamedArgs`
holding one. Here the two wrappers are named by what they offer (a `graph`, a
`grad_graph_info`), so that these names need nothing from `graph.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeAlias

import popxl
from popxl.transforms import GradGraphInfo

__all__ = ["GraphLike", "GradGraphInfoLike", "CalledGraphsGradInfoLike", "CalledGraphsGradInfo"]


class HasGraph(Protocol):
    """A wrapper of a graph: `GraphWithNamedArgs`, `BoundGraph`."""

    @property
    def graph(self) -> popxl.Graph:
        """The wrapped graph."""
        ...


class HasGradGraphInfo(Protocol):
    """A wrapper of a gradient graph's info: the `GraphWithNamedArgs` of a gradient graph."""

    @property
    def grad_graph_info(self) -> GradGraphInfo:
        """The wrapped info."""
        ...


GraphLike: TypeAlias = popxl.Graph | HasGraph
GradGraphInfoLike: TypeAlias = GradGraphInfo | HasGradGraphInfo
# (A mapping's keys are invariant: one keyed by plain graphs is a second spelling, not a special case.)
CalledGraphsGradInfoLike: TypeAlias = Mapping[popxl.Graph, GradGraphInfoLike] | Mapping[GraphLike, GradGraphInfoLike]
CalledGraphsGradInfo: TypeAlias = Mapping[popxl.Graph, GradGraphInfo]


def normalise_called_graphs_grad_info(
    called_graphs_grad_info: CalledGraphsGradInfoLike | None = None,
) -> dict[popxl.Graph, GradGraphInfo]:
    """`called_graphs_grad_info` keyed by plain graphs and holding plain `GradGraphInfo`s (empty for None)."""
    result: dict[popxl.Graph, GradGraphInfo] = {}
    for fwd, grad in (called_graphs_grad_info or {}).items():
        graph = fwd if isinstance(fwd, popxl.Graph) else getattr(fwd, "graph", None)
        info = grad if isinstance(grad, GradGraphInfo) else getattr(grad, "grad_graph_info", None)
        if not isinstance(graph, popxl.Graph) or not isinstance(info, GradGraphInfo):
            raise TypeError(
                "called_graphs_grad_info maps graphs (popxl.Graph, GraphWithNamedArgs, BoundGraph) to gradient "
                f"graphs (GradGraphInfo, GraphWithNamedArgs); got {fwd!r}: {grad!r}"
            )
        result[graph] = info
    return result
