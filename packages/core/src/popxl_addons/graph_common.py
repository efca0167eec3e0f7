"""popxl-addons' `popxl_addons.graph_common`, re-exporting this project's (`popxl_addons.core.graph_common`)."""

from __future__ import annotations

from popxl_addons.core.graph_common import (
    CalledGraphsGradInfo,
    CalledGraphsGradInfoLike,
    GradGraphInfoLike,
    GraphLike,
)

__all__ = ["GraphLike", "GradGraphInfoLike", "CalledGraphsGradInfoLike", "CalledGraphsGradInfo"]
