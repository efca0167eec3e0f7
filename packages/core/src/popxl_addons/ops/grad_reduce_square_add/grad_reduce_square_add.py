"""popxl-addons' `popxl_addons.ops.grad_reduce_square_add.grad_reduce_square_add`.

This project does not implement it yet.
"""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(__name__, ["grad_reduce_square_add"], owner="popxl_addons.core")
