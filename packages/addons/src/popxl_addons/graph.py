# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.graph`, re-exporting the names of `popxl_addons.core.modules.graph`."""

from popxl_addons.core.modules.graph import BoundGraph, GraphWithNamedArgs

__all__ = ["BoundGraph", "GraphWithNamedArgs"]
