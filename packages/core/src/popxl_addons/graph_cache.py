"""popxl-addons' `popxl_addons.graph_cache`, re-exporting this project's (`popxl_addons.core.graph_cache`)."""

from __future__ import annotations

from popxl_addons.core.graph_cache import (
    GraphCache,
    argument_hash,
    bound_arguments,
    function,
    get_function_hash,
    tensor_hash,
)

__all__ = ["GraphCache", "bound_arguments", "tensor_hash", "argument_hash", "get_function_hash", "function"]
