"""popxl-addons' `popxl_addons.testing_utils`.

Re-exports what this project has (`popxl_addons.core.testing_utils`).
"""

from __future__ import annotations

from popxl_addons.core.testing_utils import TensorInput, ops_of_type, run_module

__all__ = ["ops_of_type", "TensorInput", "run_module"]
