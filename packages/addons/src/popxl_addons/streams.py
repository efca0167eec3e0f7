# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.streams`, re-exporting the names of `popxl_addons.core.session.streams`."""

from popxl_addons.core.session.streams import InputStreams, OutputStreams

__all__ = ["InputStreams", "OutputStreams"]
