# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.graph_common`, re-exporting the names of `popxl_addons.core.modules.graph_common`."""

from popxl_addons.core.modules.graph_common import (
    CalledGraphsGradInfo,
    CalledGraphsGradInfoLike,
    GradGraphInfoLike,
    GraphLike,
)

__all__ = ["GraphLike", "GradGraphInfoLike", "CalledGraphsGradInfoLike", "CalledGraphsGradInfo"]
