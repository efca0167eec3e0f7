# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.transforms.batch_serialisation`, re-exporting the names of
`popxl_addons.core.transforms.batch_serialisation`."""

from popxl_addons.core.transforms.batch_serialisation import (
    BatchSerialResult,
    RemoteHandle,
    batch_serial_buffer,
    batch_serialise,
    batch_serialise_fwd_and_grad,
)

__all__ = [
    "BatchSerialResult",
    "RemoteHandle",
    "batch_serial_buffer",
    "batch_serialise",
    "batch_serialise_fwd_and_grad",
]
