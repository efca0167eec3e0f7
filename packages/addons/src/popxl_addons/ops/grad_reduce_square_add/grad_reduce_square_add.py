# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.grad_reduce_square_add.grad_reduce_square_add`, re-exporting the names of
`popxl_addons.core.ops.grad_reduce_square_add`."""

from popxl_addons.core.ops.grad_reduce_square_add import grad_reduce_square_add

__all__ = ["grad_reduce_square_add"]
