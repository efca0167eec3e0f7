"""popxl-addons' `popxl_addons.ops.rotary_pos_embed.rotary_pos_embed`; this project does not implement it yet."""

from __future__ import annotations

from popxl_addons import _compat

__all__: list[str] = []

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(
    __name__, ["rotary_pos_embed", "trig_tables", "trig_table_constants"], owner="popxl_addons.core"
)
