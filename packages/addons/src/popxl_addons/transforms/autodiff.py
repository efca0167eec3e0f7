# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.transforms.autodiff`, re-exporting the names of
`popxl_addons.core.transforms.autodiff`."""

from popxl_addons.core.transforms.autodiff import autodiff, autodiff_with_accumulation

__all__ = ["autodiff", "autodiff_with_accumulation"]
