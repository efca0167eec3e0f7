"""Host and remote transfers of `popxl.ops`."""

from __future__ import annotations

from typing import Any

import numpy as np

from popxl import context, dtypes
from popxl.creation import constant
from popxl.op import create_op
from popxl.opdefs import io
from popxl.remote_buffer import RemoteBuffer
from popxl.streams import DeviceToHostStream, HostToDeviceStream
from popxl.tensor import Tensor


def _take_id(name: str) -> None:
    """Take the id `name` (under the current name scopes) in the current graph, as popxl's unseen
    intermediate tensors do, so that later tensors of that name get the ids they get in popxl."""
    context.gcg().take_id(context.name_scope_prefix() + name)


def host_load(h2d_stream: HostToDeviceStream, name: str | None = None) -> Tensor:
    """The next transfer of `h2d_stream` as a tensor of the current graph."""
    if not isinstance(h2d_stream, HostToDeviceStream):
        raise TypeError(f"host_load takes a HostToDeviceStream, got {h2d_stream!r}")
    # popxl (python/popxl/ops/host_load.py): `<name>_hostload`, `name` defaulting to the stream's
    # id; popxl first makes an init tensor `<name>_init`, whose id is taken here too.
    base = name if name is not None else h2d_stream.tensor_id
    _take_id(f"{base}_init")
    return create_op(io.HOST_LOAD, [], {"stream": h2d_stream}, names=[f"{base}_hostload"])[0]


def host_store(d2h_stream: DeviceToHostStream, t: Tensor) -> None:
    """Send `t` as the next transfer of `d2h_stream`."""
    if not isinstance(d2h_stream, DeviceToHostStream):
        raise TypeError(f"host_store takes a DeviceToHostStream, got {d2h_stream!r}")
    create_op(io.HOST_STORE, [t], {"stream": d2h_stream})


def _offset(offset: int | Tensor) -> Tensor:
    if isinstance(offset, Tensor):
        return offset
    if int(offset) < 0:
        raise ValueError(f"A remote buffer offset must be >= 0, got {offset}")
    return constant(np.int32(offset), dtypes.int32, "offset")


def _check_buffer(buffer: Any) -> RemoteBuffer:
    if not isinstance(buffer, RemoteBuffer):
        raise TypeError(f"Expected a RemoteBuffer, got {buffer!r}")
    if buffer.ir is not context.gir():
        raise ValueError(f"{buffer} belongs to another Ir")
    return buffer


def remote_load(remote_buffer: RemoteBuffer, offset: int | Tensor, name: str | None = None) -> Tensor:
    """Entry `offset` of `remote_buffer` on each replica."""
    _check_buffer(remote_buffer)
    off = _offset(offset)
    # popxl (python/popxl/ops/remote_load.py): `<name>_remote_loaded`, `name` defaulting to
    # `id_<buffer id>_offset_<offset name>`; popxl first makes an init tensor `<name>_remote_load`,
    # whose id is taken here too.
    base = name if name is not None else f"id_{remote_buffer.remote_buffer_id}_offset_{off.name}"
    _take_id(f"{base}_remote_load")
    return create_op(io.REMOTE_LOAD, [off], {"buffer": remote_buffer}, names=[f"{base}_remote_loaded"])[0]


def remote_load_(remote_buffer: RemoteBuffer, offset: int | Tensor, t: Tensor) -> Tensor:
    """Load entry `offset` of `remote_buffer` into `t` in place."""
    _check_buffer(remote_buffer)
    attrs = {"buffer": remote_buffer}
    # popxl: `remote_load_inplace_out` (python/popxl/ops/remote_load.py: remote_load_).
    return create_op(io.REMOTE_LOAD_INPLACE, [t, _offset(offset)], attrs, names=["remote_load_inplace_out"])[0]


def remote_store(remote_buffer: RemoteBuffer, offset: int | Tensor, t: Tensor) -> None:
    """Write `t` to entry `offset` of `remote_buffer` on each replica."""
    _check_buffer(remote_buffer)
    create_op(io.REMOTE_STORE, [_offset(offset), t], {"buffer": remote_buffer})


def io_tile_copy(t: Tensor) -> Tensor:
    """Copy `t` between the compute and IO tile sets (the identity off-IPU)."""
    # popxl: `<t>_iotilecopy` (python/popxl/ops/io_tile_copy.py).
    return create_op(io.IO_TILE_COPY, [t], names=[f"{t.name}_iotilecopy"])[0]


def init(shape: Any, dtype: Any, name: str | None = None, init_type: str = "zero", meta_shape: Any = ()) -> Tensor:
    """A new tensor initialised to zeros ("undef" also gives zeros here)."""
    if init_type not in ("zero", "undef"):
        raise ValueError(f"init_type must be 'zero' or 'undef', got {init_type!r}")
    attrs = {"shape": tuple(shape), "dtype": dtypes.as_dtype(dtype), "meta_shape": tuple(meta_shape)}
    # popxl names an unnamed init `t`, the default of `Graph._create_tensor_id` (python/popxl/ops/init.py).
    return create_op(io.INIT, [], attrs, names=[name or "t"])[0]
