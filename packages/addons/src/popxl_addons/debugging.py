# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.debugging`, re-exporting the names of `popxl_addons.core.debugging`."""

from popxl_addons.core.debugging import print_tensor, print_text

__all__ = ["print_tensor", "print_text"]
