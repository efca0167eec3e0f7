"""popxl-addons' `popxl_addons.route_tensor`, re-exporting what this project has (`popxl_addons.core.route_tensor`)."""

from __future__ import annotations

from popxl_addons.core.route_tensor import is_subgraph, route_tensor_into_graph

__all__ = ["route_tensor_into_graph", "is_subgraph"]
