"""popxl-addons' custom op package `popxl_addons.ops.group_quantize_decompress`, from `popxl_addons.core`.

As in popxl-addons, `popxl_addons.ops.group_quantize_decompress.group_quantize_decompress` is the
function, bound over the sub-module of the same name.
"""

from __future__ import annotations

from popxl_addons.ops.group_quantize_decompress.group_quantize_decompress import (
    group_quantize_compress_numpy,
    group_quantize_decompress,
    group_quantize_decompress_numpy,
)

__all__ = ["group_quantize_compress_numpy", "group_quantize_decompress", "group_quantize_decompress_numpy"]
