"""Host stream helpers: a stream and its load or store created together, and named collections of streams."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

import numpy as np

import popxl
from popxl import ops
from popxl.utils import to_numpy

__all__ = ["InputStreams", "OutputStreams", "host_load", "host_store"]

S = TypeVar("S", popxl.HostToDeviceStream, popxl.DeviceToHostStream)


def host_load(
    t: Any, dtype: popxl.dtype, name: str
) -> tuple[np.ndarray[Any, Any], popxl.HostToDeviceStream, popxl.Tensor]:
    """The host data (a NumPy array, a PyTorch tensor, ...) as `dtype`, a stream `<name>_stream` of its shape,
    and the tensor loaded from it."""
    data = to_numpy(t, dtype=dtype)
    stream = popxl.h2d_stream(data.shape, dtype, name=f"{name}_stream")
    return data, stream, ops.host_load(stream, name)


def host_store(t: popxl.Tensor) -> popxl.DeviceToHostStream:
    """A stream `<t.name>_stream` of `t`'s shape, and `t` stored to it."""
    stream = popxl.d2h_stream(t.shape, t.dtype, name=f"{t.name}_stream")
    ops.host_store(stream, t)
    return stream


class _Streams(Generic[S]):
    """Streams by name, in creation order; `streams.x`, `streams["x"]` and `streams[0]` reach one."""

    _create: Any

    def __init__(self, **specs: tuple[tuple[int, ...], popxl.dtype]) -> None:
        self._streams: dict[str, S] = {}
        for name, (shape, dtype) in specs.items():
            self._streams[name] = type(self)._create(shape, dtype, name)

    @classmethod
    def from_streams(cls, streams: Iterable[S]) -> Any:
        """A collection of existing streams, named by their tensor ids."""
        new = cls()
        for stream in streams:
            new._streams[stream.tensor_id] = stream
        return new

    def __getattr__(self, name: str) -> S:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._streams[name]
        except KeyError:
            raise AttributeError(f"No stream {name!r}. Streams: {list(self._streams)}") from None

    def __getitem__(self, key: str | int) -> S:
        if isinstance(key, int):
            return list(self._streams.values())[key]
        try:
            return self._streams[key]
        except KeyError:
            raise KeyError(f"No stream {key!r}. Streams: {list(self._streams)}") from None

    def __iter__(self) -> Iterator[S]:
        return iter(self._streams.values())

    def __len__(self) -> int:
        return len(self._streams)

    def keys(self) -> list[str]:
        """Stream names in creation order."""
        return list(self._streams)


class InputStreams(_Streams[popxl.HostToDeviceStream]):
    """Host-to-device streams by name: `InputStreams(x=((2, 4), popxl.float32))`, then `ops.host_load(inputs.x)`."""

    _create = staticmethod(popxl.h2d_stream)


class OutputStreams(_Streams[popxl.DeviceToHostStream]):
    """Device-to-host streams by name: `OutputStreams(y=((2, 4), popxl.float32))`, then `host_store(outputs.y, y)`."""

    _create = staticmethod(popxl.d2h_stream)
