"""popxl-addons' `popxl_addons.graph_cache`, re-exporting what this project has (`popxl_addons.core.graph_cache`)."""

from __future__ import annotations

from popxl_addons import _compat
from popxl_addons.core.graph_cache import GraphCache

__all__ = ["GraphCache"]

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(
    __name__,
    ["bound_arguments", "tensor_hash", "argument_hash", "get_function_hash", "function"],
    owner="popxl_addons.core",
)
