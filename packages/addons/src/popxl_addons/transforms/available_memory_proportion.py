# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.transforms.available_memory_proportion`: the proportions are recorded on the ops and
change nothing off an IPU."""

from popxl_addons.core.transforms.available_memory import (
    set_available_memory_proportion_by_ipu,
    set_graph_available_memory_proportion_by_ipu,
)

__all__ = ["set_available_memory_proportion_by_ipu", "set_graph_available_memory_proportion_by_ipu"]
