"""popxl-addons' `popxl_addons.transforms.recomputation`.

Re-exports what this project has (`popxl_addons.core.recomputation`).
"""

from __future__ import annotations

from popxl_addons import _compat
from popxl_addons.core.recomputation import recompute_graph

__all__ = ["recompute_graph"]

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(__name__, ["add_recompute_inputs"], owner="popxl_addons.core")
