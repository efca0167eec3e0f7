"""popxl-addons' `popxl_addons.transforms.repeat_graph`.

Re-exports what this project has (`popxl_addons.core.repeat_graph`).
"""

from __future__ import annotations

from popxl_addons.core.repeat_graph import repeat_graph

__all__ = ["repeat_graph"]
