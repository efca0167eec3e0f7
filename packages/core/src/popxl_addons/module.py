"""popxl-addons' `popxl_addons.module`, re-exporting what this project has (`popxl_addons.core.module`)."""

from __future__ import annotations

from popxl_addons import _compat
from popxl_addons.core.module import Module

__all__ = ["Module"]

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(__name__, ["NameScopeMeta", "create_grad_graph_info"], owner="popxl_addons.core")
