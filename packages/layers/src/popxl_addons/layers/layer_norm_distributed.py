"""popxl-addons' `popxl_addons.layers.layer_norm_distributed`.

`LayerNormDistributed`, re-exported from `popxl_addons.collectives` when first used. The layer is
built on a collective op, so it ships in popxl-addons-collectives, and popxl-addons-layers keeps
depending on core only (it installs without the collectives); without popxl-addons-collectives,
using the name says to install it.
"""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# Resolved on first use from popxl_addons.collectives.
__getattr__ = _compat.not_implemented(__name__, ["LayerNormDistributed"], owner="popxl_addons.collectives")
