"""popxl-addons' `popxl_addons.named_tensors`.

Re-exports what this project has (`popxl_addons.core.named_tensors`, `.task_session`).
"""

from __future__ import annotations

from popxl_addons import _compat
from popxl_addons.core.named_tensors import NamedTensors
from popxl_addons.core.task_session import NamedTensorData

__all__ = ["NamedTensors", "NamedTensorData"]

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(__name__, ["TensorMap", "print_named_tensors"], owner="popxl_addons.core")
