# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.patterns`, re-exporting the names of `popxl_addons.core.transforms.patterns`."""

from popxl_addons.core.transforms.patterns import apply_pre_alias_patterns, patterns_level

__all__ = ["apply_pre_alias_patterns", "patterns_level"]
