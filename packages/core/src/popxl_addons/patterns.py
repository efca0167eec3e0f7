"""popxl-addons' `popxl_addons.patterns`, re-exporting this project's (`popxl_addons.core.patterns`)."""

from __future__ import annotations

from popxl_addons.core.patterns import apply_pre_alias_patterns, patterns_level

__all__ = ["apply_pre_alias_patterns", "patterns_level"]
