"""popxl-addons' `popxl_addons.ops.cross_entropy`: its names, re-exported from `popxl_addons.core` when first used."""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# Resolved on first use from popxl_addons.core.
__getattr__ = _compat.not_implemented(__name__, ["cross_entropy", "cross_entropy_with_grad"], owner="popxl_addons.core")
