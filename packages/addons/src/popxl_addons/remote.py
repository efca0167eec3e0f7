# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.remote`, re-exporting the names of `popxl_addons.core.remote.remote`."""

from popxl_addons.core.remote.remote import (
    NamedRemoteBuffers,
    create_remote_buffer,
    load_remote,
    load_remote_graph,
    named_buffers,
    named_variable_buffers,
    store_remote,
    store_remote_graph,
)

__all__ = [
    "load_remote_graph",
    "store_remote_graph",
    "named_buffers",
    "named_variable_buffers",
    "create_remote_buffer",
    "NamedRemoteBuffers",
    "load_remote",
    "store_remote",
]
