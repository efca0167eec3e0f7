"""popxl-addons' `popxl_addons.debugging`, re-exporting this project's (`popxl_addons.core.debugging`)."""

from __future__ import annotations

from popxl_addons.core.debugging import print_tensor, print_text

__all__ = ["print_tensor", "print_text"]
