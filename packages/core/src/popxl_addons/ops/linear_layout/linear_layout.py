"""popxl-addons' `popxl_addons.ops.linear_layout.linear_layout`.

Its name, re-exported from `popxl_addons.core` when first used.
"""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# Resolved on first use from popxl_addons.core.
__getattr__ = _compat.not_implemented(__name__, ["linear_layout"], owner="popxl_addons.core")
