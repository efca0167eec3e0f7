# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.testing_utils`, re-exporting the names of `popxl_addons.core.session.testing_utils`."""

from popxl_addons.core.session.testing_utils import TensorInput, ops_of_type, run_module

__all__ = ["ops_of_type", "TensorInput", "run_module"]
