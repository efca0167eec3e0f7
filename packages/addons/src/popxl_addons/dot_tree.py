# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.dot_tree`, re-exporting the names of `popxl_addons.core.modules.dot_tree`."""

from popxl_addons.core.modules.dot_tree import DotTree, sanitise, to_mapping

__all__ = ["DotTree", "sanitise", "to_mapping"]
