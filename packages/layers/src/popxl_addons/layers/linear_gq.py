"""popxl-addons' `popxl_addons.layers.linear_gq`; this project does not implement it yet."""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(__name__, ["LinearGQ"], owner="popxl_addons.layers")
