# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.static_sparse_ops.dense_sparse_matmul`, re-exporting the names of
`popxl_addons.core.ops.static_sparse_ops`."""

from popxl_addons.core.ops.static_sparse_ops import dense_const_sparse_matmul, random_sparse

__all__ = ["dense_const_sparse_matmul", "random_sparse"]
