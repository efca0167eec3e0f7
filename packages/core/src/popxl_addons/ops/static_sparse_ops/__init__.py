"""popxl-addons' custom op `popxl_addons.ops.static_sparse_ops`; this project does not implement it yet."""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(
    __name__, ["dense_const_sparse_matmul", "random_sparse"], owner="popxl_addons.core"
)
