"""popxl-addons' `popxl_addons.ops.group_quantize_decompress.group_quantize_decompress`, re-exporting
`popxl_addons.core.group_quantize`'s names."""

from __future__ import annotations

from popxl_addons.core.group_quantize import (
    group_quantize_compress_numpy,
    group_quantize_decompress,
    group_quantize_decompress_numpy,
)

__all__ = ["group_quantize_compress_numpy", "group_quantize_decompress", "group_quantize_decompress_numpy"]
