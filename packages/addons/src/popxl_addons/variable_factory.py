# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.variable_factory`, re-exporting the names of
`popxl_addons.core.modules.variable_factory`."""

from popxl_addons.core.modules.variable_factory import (
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
