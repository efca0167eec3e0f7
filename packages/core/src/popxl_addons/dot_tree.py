"""popxl-addons' `popxl_addons.dot_tree`, re-exporting what this project has (`popxl_addons.core.dot_tree`)."""

from __future__ import annotations

from popxl_addons import _compat
from popxl_addons.core.dot_tree import DotTree, sanitise

__all__ = ["DotTree", "sanitise"]

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(__name__, ["to_mapping"], owner="popxl_addons.core")
