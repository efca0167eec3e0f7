# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.grad_reduce_square_add`, re-exporting its sub-modules' names."""

from popxl_addons.ops.grad_reduce_square_add.grad_reduce_square_add import grad_reduce_square_add

__all__ = ["grad_reduce_square_add"]
