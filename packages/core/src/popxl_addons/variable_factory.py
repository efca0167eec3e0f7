"""popxl-addons' `popxl_addons.variable_factory`.

Re-exports this project's (`popxl_addons.core.variable_factory`).
"""

from __future__ import annotations

from popxl_addons.core.variable_factory import (
    NamedVariableFactories,
    VariableFactory,
    add_replica_sharded_variable_input,
    add_variable_input,
    host_scalar_tensor_types,
)

__all__ = [
    "VariableFactory",
    "NamedVariableFactories",
    "add_variable_input",
    "add_replica_sharded_variable_input",
    "host_scalar_tensor_types",
]
