"""popxl-addons' `popxl_addons.transforms.repeat_graph`; this project has none of its names yet."""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(__name__, ["repeat_graph"], owner="popxl_addons.core")
