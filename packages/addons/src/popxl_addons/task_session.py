# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.task_session`, re-exporting the names of `popxl_addons.core.session.task_session`."""

from popxl_addons.core.session.task_session import (
    NamedTensorData,
    TaskSession,
    initialise_memmap_dir_from_checkpoint,
    write_variables_pb,
)

__all__ = ["TaskSession", "write_variables_pb", "NamedTensorData", "initialise_memmap_dir_from_checkpoint"]
