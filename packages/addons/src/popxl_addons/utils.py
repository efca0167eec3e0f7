# Generated from the table in popxl_addons/_paths.py by `python -m popxl_addons._shells`; do not edit.
"""popxl-addons' `popxl_addons.utils`, re-exporting the names of `popxl_addons.core.utils`."""

from popxl_addons.core.utils import OrderedDict, WeightsDict, timer
from popxl_addons.core.utils import duplicate_items as duplicate_items
from popxl_addons.core.utils import suffix_graph_name as suffix_graph_name

__all__ = ["timer", "OrderedDict", "WeightsDict"]
