"""popxl-addons' `popxl_addons.ops.replicated_all_reduce_TP.replicated_all_reduce_TP`.

Re-exports what this project has (`popxl_addons.collectives`).
"""  # noqa: N999  (popxl-addons' module name)

from __future__ import annotations

from popxl_addons.collectives import (
    replicated_all_reduce,
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)

__all__ = [
    "replicated_all_reduce_identical_inputs",
    "replicated_all_reduce_identical_grad_inputs",
    "replicated_all_reduce",
]
