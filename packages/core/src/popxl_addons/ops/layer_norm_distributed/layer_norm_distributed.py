"""popxl-addons' `popxl_addons.ops.layer_norm_distributed.layer_norm_distributed`.

Its name, re-exported from `popxl_addons.collectives` when first used.
The op is shipped by popxl-addons-collectives; without it, using the name says to install it.
"""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# Resolved on first use from popxl_addons.collectives.
__getattr__ = _compat.not_implemented(__name__, ["layer_norm_distributed"], owner="popxl_addons.collectives")
