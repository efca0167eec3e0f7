"""popxl-addons' `popxl_addons.patterns`, re-exporting what this project has (`popxl_addons.core.patterns`)."""

from __future__ import annotations

from popxl_addons import _compat
from popxl_addons.core.patterns import apply_pre_alias_patterns

__all__ = ["apply_pre_alias_patterns"]

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(__name__, ["patterns_level"], owner="popxl_addons.core")
