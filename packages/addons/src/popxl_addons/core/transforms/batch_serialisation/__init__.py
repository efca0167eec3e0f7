"""Batch serialisation: run a micro-batch graph over many steps with IO to host and remote memory."""

from popxl_addons.core.transforms.batch_serialisation.buffers import batch_serial_buffer
from popxl_addons.core.transforms.batch_serialisation.fwd_and_grad import batch_serialise_fwd_and_grad
from popxl_addons.core.transforms.batch_serialisation.handles import RemoteHandle
from popxl_addons.core.transforms.batch_serialisation.result import BatchSerialResult
from popxl_addons.core.transforms.batch_serialisation.transform import IO_MODES, batch_serialise

__all__ = [
    "IO_MODES",
    "BatchSerialResult",
    "RemoteHandle",
    "batch_serial_buffer",
    "batch_serialise",
    "batch_serialise_fwd_and_grad",
]
