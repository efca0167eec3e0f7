"""popxl-addons' `popxl_addons.streams`, re-exporting what this project has (`popxl_addons.core.streams`)."""

from __future__ import annotations

from popxl_addons.core.streams import InputStreams, OutputStreams

__all__ = ["InputStreams", "OutputStreams"]
