# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.graph_cache`, re-exporting the names of `popxl_addons.core.modules.graph_cache`."""

from popxl_addons.core.modules.graph_cache import (
    GraphCache,
    argument_hash,
    bound_arguments,
    function,
    get_function_hash,
    tensor_hash,
)

__all__ = ["GraphCache", "bound_arguments", "tensor_hash", "argument_hash", "get_function_hash", "function"]
