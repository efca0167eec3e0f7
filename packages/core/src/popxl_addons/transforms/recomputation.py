"""popxl-addons' `popxl_addons.transforms.recomputation`.

Re-exports this project's (`popxl_addons.core.recomputation`).
"""

from __future__ import annotations

from popxl_addons.core.recomputation import add_recompute_inputs, recompute_graph

__all__ = ["add_recompute_inputs", "recompute_graph"]
