"""popxl-addons' `popxl_addons.named_tensors`.

Re-exports this project's (`popxl_addons.core.named_tensors`, `.task_session`).
"""

from __future__ import annotations

from popxl_addons.core.named_tensors import NamedTensors, TensorMap, print_named_tensors
from popxl_addons.core.task_session import NamedTensorData

__all__ = ["NamedTensors", "NamedTensorData", "TensorMap", "print_named_tensors"]
