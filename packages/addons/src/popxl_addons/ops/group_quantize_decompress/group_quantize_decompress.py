# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.group_quantize_decompress.group_quantize_decompress`, re-exporting the names of
`popxl_addons.core.ops.group_quantize`."""

from popxl_addons.core.ops.group_quantize import (
    group_quantize_compress_numpy,
    group_quantize_decompress,
    group_quantize_decompress_numpy,
)

__all__ = ["group_quantize_compress_numpy", "group_quantize_decompress", "group_quantize_decompress_numpy"]
