"""popxl-addons' custom op `popxl_addons.ops.cross_entropy_sharded_wr_loss`; this project does not implement it yet."""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(__name__, ["cross_entropy_sharded_wr_loss"], owner="popxl_addons.core")
