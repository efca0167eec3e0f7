"""popxl-addons' `popxl_addons.transforms.batch_serialisation`.

Re-exports what this project has (`popxl_addons.core.batch_serialisation`).
"""

from __future__ import annotations

from popxl_addons.core.batch_serialisation import (
    BatchSerialResult,
    RemoteHandle,
    batch_serial_buffer,
    batch_serialise,
    batch_serialise_fwd_and_grad,
)

__all__ = [
    "batch_serialise",
    "batch_serialise_fwd_and_grad",
    "batch_serial_buffer",
    "RemoteHandle",
    "BatchSerialResult",
]
