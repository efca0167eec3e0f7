"""popxl-addons' `popxl_addons.performance_utils`.

Re-exports what this project has (`popxl_addons.core.performance_utils`).
"""

from __future__ import annotations

from popxl_addons.core.performance_utils import (
    evaluate_FLOPs,
    evaluate_ir_FLOPs,
    format_flops_scientific,
    print_FLOPs,
    total_FLOPs,
)

__all__ = ["total_FLOPs", "evaluate_ir_FLOPs", "evaluate_FLOPs", "print_FLOPs", "format_flops_scientific"]
