# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.seed_variable`, re-exporting the names of `popxl_addons.core.remote.seed_variable`."""

from popxl_addons.core.remote.seed_variable import seed_variable

__all__ = ["seed_variable"]
