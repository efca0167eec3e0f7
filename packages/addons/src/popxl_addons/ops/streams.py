# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.ops.streams`, re-exporting the names of `popxl_addons.core.session.streams`."""

from popxl_addons.core.session.streams import host_load, host_store

__all__ = ["host_load", "host_store"]
