"""popxl-addons' `popxl_addons.transforms.available_memory_proportion`.

Re-exports what this project has (`popxl_addons.core.available_memory`): the proportions are recorded on
the ops and change nothing off an IPU.
"""

from __future__ import annotations

from popxl_addons.core.available_memory import (
    set_available_memory_proportion_by_ipu,
    set_graph_available_memory_proportion_by_ipu,
)

__all__ = ["set_available_memory_proportion_by_ipu", "set_graph_available_memory_proportion_by_ipu"]
