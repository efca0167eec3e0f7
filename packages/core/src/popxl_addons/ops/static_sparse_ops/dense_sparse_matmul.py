"""popxl-addons' `popxl_addons.ops.static_sparse_ops.dense_sparse_matmul`.

Its names, re-exported from `popxl_addons.core` when first used.
"""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# Resolved on first use from popxl_addons.core.
__getattr__ = _compat.not_implemented(
    __name__, ["dense_const_sparse_matmul", "random_sparse"], owner="popxl_addons.core"
)
