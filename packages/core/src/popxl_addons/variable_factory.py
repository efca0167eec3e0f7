"""popxl-addons' `popxl_addons.variable_factory`.

Re-exports what this project has (`popxl_addons.core.variable_factory`).
"""

from __future__ import annotations

from popxl_addons import _compat
from popxl_addons.core.variable_factory import (
    NamedVariableFactories,
    VariableFactory,
    add_replica_sharded_variable_input,
    add_variable_input,
)

__all__ = ["VariableFactory", "NamedVariableFactories", "add_variable_input", "add_replica_sharded_variable_input"]

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(__name__, ["host_scalar_tensor_types"], owner="popxl_addons.core")
