"""popxl-addons' `popxl_addons.performance_utils`; this project has none of its names yet."""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(
    __name__,
    ["total_FLOPs", "evaluate_ir_FLOPs", "evaluate_FLOPs", "print_FLOPs", "format_flops_scientific"],
    owner="popxl_addons.core",
)
