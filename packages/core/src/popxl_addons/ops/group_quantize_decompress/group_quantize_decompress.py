"""popxl-addons' `popxl_addons.ops.group_quantize_decompress.group_quantize_decompress`.

This project does not implement it yet.
"""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(
    __name__,
    ["group_quantize_decompress", "group_quantize_decompress_numpy", "group_quantize_compress_numpy"],
    owner="popxl_addons.core",
)
