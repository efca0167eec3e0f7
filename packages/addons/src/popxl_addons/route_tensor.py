# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.route_tensor`, re-exporting the names of `popxl_addons.core.transforms.route_tensor`."""

from popxl_addons.core.transforms.route_tensor import is_subgraph, route_tensor_into_graph

__all__ = ["route_tensor_into_graph", "is_subgraph"]
