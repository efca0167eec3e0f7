# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.static_sparse_ops`, re-exporting its sub-modules' names."""

from popxl_addons.ops.static_sparse_ops.dense_sparse_matmul import dense_const_sparse_matmul, random_sparse

__all__ = ["dense_const_sparse_matmul", "random_sparse"]
