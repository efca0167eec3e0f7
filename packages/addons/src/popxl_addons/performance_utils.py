# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.performance_utils`, re-exporting the names of `popxl_addons.core.performance_utils`."""

from popxl_addons.core.performance_utils import (
    evaluate_FLOPs,
    evaluate_ir_FLOPs,
    format_flops_scientific,
    print_FLOPs,
    total_FLOPs,
)

__all__ = ["total_FLOPs", "evaluate_ir_FLOPs", "evaluate_FLOPs", "print_FLOPs", "format_flops_scientific"]
