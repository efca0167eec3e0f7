"""popxl-addons' `popxl_addons.ops.layer_norm_distributed.layer_norm_distributed`.

This project does not implement it yet.
"""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(__name__, ["layer_norm_distributed"], owner="popxl_addons.core")
