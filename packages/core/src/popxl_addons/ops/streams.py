"""popxl-addons' `popxl_addons.ops.streams`, re-exporting what this project has (`popxl_addons.core.streams`)."""

from __future__ import annotations

from popxl_addons.core.streams import host_load, host_store

__all__ = ["host_load", "host_store"]
