"""popxl-addons' `popxl_addons.transforms.autodiff`.

Re-exports what this project has (`popxl_addons.core.autodiff`).
"""

from __future__ import annotations

from popxl_addons.core.autodiff import autodiff, autodiff_with_accumulation

__all__ = ["autodiff", "autodiff_with_accumulation"]
