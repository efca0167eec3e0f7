"""popxl-addons' `popxl_addons.utils`.

Re-exports what this project has (`popxl_addons.core.utils`).
"""

from __future__ import annotations

from popxl_addons.core.utils import OrderedDict, WeightsDict, timer

# popxl-addons' names outside its `__all__`, re-exported too.
from popxl_addons.core.utils import duplicate_items as duplicate_items
from popxl_addons.core.utils import suffix_graph_name as suffix_graph_name

# popxl-addons' own `__all__`.
__all__ = ["timer", "OrderedDict", "WeightsDict"]
