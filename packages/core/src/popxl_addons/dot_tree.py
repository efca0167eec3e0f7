"""popxl-addons' `popxl_addons.dot_tree`, re-exporting this project's (`popxl_addons.core.dot_tree`)."""

from __future__ import annotations

from popxl_addons.core.dot_tree import DotTree, sanitise, to_mapping

__all__ = ["DotTree", "sanitise", "to_mapping"]
