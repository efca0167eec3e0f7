# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.rotary_pos_embed`, re-exporting its sub-modules' names."""

from popxl_addons.ops.rotary_pos_embed.rotary_pos_embed import rotary_pos_embed, trig_table_constants, trig_tables

__all__ = ["rotary_pos_embed", "trig_table_constants", "trig_tables"]
