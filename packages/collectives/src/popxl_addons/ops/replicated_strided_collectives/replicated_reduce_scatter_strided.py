"""popxl-addons' `popxl_addons.ops.replicated_strided_collectives.replicated_reduce_scatter_strided`.

Re-exports what this project has (`popxl_addons.collectives`).
"""

from __future__ import annotations

from popxl_addons.collectives import replicated_reduce_scatter_strided

__all__ = ["replicated_reduce_scatter_strided"]
