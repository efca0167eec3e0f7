"""popxl-addons' `popxl_addons.seed_variable`.

Re-exports what this project has (`popxl_addons.core.seed_variable`).
"""

from __future__ import annotations

from popxl_addons.core.seed_variable import seed_variable

__all__ = ["seed_variable"]
