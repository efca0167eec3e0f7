# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.utils`, re-exporting the names of `popxl_addons.core.utils`."""

from popxl_addons.core.utils import OrderedDict, WeightsDict, duplicate_items, suffix_graph_name, timer

__all__ = ["timer", "OrderedDict", "WeightsDict", "suffix_graph_name", "duplicate_items"]
