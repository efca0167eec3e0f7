# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.module`, re-exporting the names of `popxl_addons.core.modules.module`."""

from popxl_addons.core.modules.module import Module, NameScopeMeta, create_grad_graph_info

__all__ = ["Module", "NameScopeMeta", "create_grad_graph_info"]
