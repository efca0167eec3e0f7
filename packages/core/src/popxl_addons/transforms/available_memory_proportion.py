"""popxl-addons' `popxl_addons.transforms.available_memory_proportion`; this project has none of its names yet."""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(
    __name__,
    ["set_available_memory_proportion_by_ipu", "set_graph_available_memory_proportion_by_ipu"],
    owner="popxl_addons.core",
)
