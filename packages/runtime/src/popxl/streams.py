"""Host streams: per-run host arrays read by `host_load` and written by `host_store`."""

from __future__ import annotations

from typing import Any

from popxl import context, dtypes
from popxl.tensor import SpecView, TensorSpec


class _Stream(SpecView):
    def __init__(self, shape: tuple[int, ...], dtype: dtypes.dtype, name: str, kind: str) -> None:
        main = context.gir().main_graph
        self._spec = TensorSpec(tuple(shape), dtype)
        self._id = main.take_id(name)
        self._kind = kind

    @property
    def tensor_id(self) -> str:
        """Unique id of the stream in its Ir."""
        return self._id

    def __repr__(self) -> str:
        return f"{type(self).__name__}[{self._id} {self.dtype.name} {self.shape}]"


class HostToDeviceStream(_Stream):
    """A stream of host data read by `ops.host_load`."""


class DeviceToHostStream(_Stream):
    """A stream of device data written by `ops.host_store`."""


def h2d_stream(shape: Any, dtype: Any, name: str | None = None) -> HostToDeviceStream:
    """A host-to-device stream, always owned by the main graph."""
    return HostToDeviceStream(tuple(shape), dtypes.as_dtype(dtype), name or "h2d_stream", "h2d")


def d2h_stream(shape: Any, dtype: Any, name: str | None = None) -> DeviceToHostStream:
    """A device-to-host stream, always owned by the main graph."""
    return DeviceToHostStream(tuple(shape), dtypes.as_dtype(dtype), name or "d2h_stream", "d2h")
