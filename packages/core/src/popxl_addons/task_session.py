"""popxl-addons' `popxl_addons.task_session`, re-exporting what this project has (`popxl_addons.core.task_session`)."""

from __future__ import annotations

from popxl_addons.core.task_session import (
    NamedTensorData,
    TaskSession,
    initialise_memmap_dir_from_checkpoint,
    write_variables_pb,
)

__all__ = ["TaskSession", "write_variables_pb", "NamedTensorData", "initialise_memmap_dir_from_checkpoint"]
