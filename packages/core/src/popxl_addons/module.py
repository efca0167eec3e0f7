"""popxl-addons' `popxl_addons.module`, re-exporting this project's (`popxl_addons.core.module`)."""

from __future__ import annotations

from popxl_addons.core.module import Module, NameScopeMeta, create_grad_graph_info

__all__ = ["Module", "NameScopeMeta", "create_grad_graph_info"]
