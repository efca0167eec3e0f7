"""popxl-addons' `popxl_addons.ops.fp8_amax_scale`; this project has none of its names yet."""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(__name__, ["fp8_amax_scale"], owner="popxl_addons.core")
