"""popxl-addons' `popxl_addons.graph`, re-exporting what this project has (`popxl_addons.core.graph`)."""

from __future__ import annotations

from popxl_addons.core.graph import BoundGraph, GraphWithNamedArgs

__all__ = ["BoundGraph", "GraphWithNamedArgs"]
