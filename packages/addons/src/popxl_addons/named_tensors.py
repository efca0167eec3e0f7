# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.named_tensors`, re-exporting the names of `popxl_addons.core.modules.named_tensors` and
`popxl_addons.core.session.task_session`."""

from popxl_addons.core.modules.named_tensors import NamedTensors, TensorMap, print_named_tensors
from popxl_addons.core.session.task_session import NamedTensorData

__all__ = ["NamedTensors", "TensorMap", "print_named_tensors", "NamedTensorData"]
