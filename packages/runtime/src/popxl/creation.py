"""Creating constants and variables."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from popxl import context, dtypes
from popxl.fp8_utils import FLOAT8, host_pow2scale_cast_to_fp8
from popxl.remote_buffer import RemoteBuffer, replica_sharded_buffer
from popxl.replica_grouping import ReplicaGrouping
from popxl.tensor import Constant, LoadedVariable, RemoteVariable, Variable
from popxl.utils import to_numpy

_WIDE = (np.dtype(np.int64), np.dtype(np.uint64), np.dtype(np.float64))


def _as_array(
    data: Any,
    dtype: Any | None,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
    downcast: bool = True,
) -> tuple[np.ndarray[Any, Any], dtypes.dtype]:
    """A C-ordered copy of `data` in its host representation (`data` itself where `_kept`): float8 data as
    popxl's bytes, converted from numbers by `cast(data * 2**log2_scale)` when it is not already float8.

    As in popxl, `downcast` applies when no `dtype` is given: 64-bit data (Python ints and floats included)
    narrows to 32 bits, and with `downcast=False` it would stay 64-bit, which no tensor here can be, so
    that is refused naming `downcast`."""
    is_float8 = isinstance(data, np.ndarray) and data.dtype in dtypes.FLOAT8_HOST
    dt = dtypes.as_dtype(dtype) if dtype is not None else (dtypes.FLOAT8_HOST[data.dtype] if is_float8 else None)
    if dt in FLOAT8:
        if is_float8:
            if dtypes.FLOAT8_HOST[data.dtype] is not dt:
                raise ValueError(f"Data of {dtypes.FLOAT8_HOST[data.dtype]} given for a tensor of {dt}")
            return np.array(data, order="C"), dt
        overflow = True if nan_on_overflow is None else nan_on_overflow
        return host_pow2scale_cast_to_fp8(data, dt, log2_scale or 0, overflow), dt
    if log2_scale is not None or nan_on_overflow is not None:
        raise RuntimeError("log2_scale and nan_on_overflow apply to popxl.float8_143 and popxl.float8_152 only")
    arr = to_numpy(data, copy=False, downcast=downcast)
    if dt is None and arr.dtype in _WIDE:
        raise TypeError(
            f"downcast=False keeps {arr.dtype} data 64-bit, as popxl does, and this runtime has no 64-bit "
            f"tensors (XLA here runs without 64-bit types): leave downcast=True or give a 32-bit dtype"
        )
    dt = dt if dt is not None else dtypes.as_dtype(arr)
    if arr.dtype == dt.as_numpy() and arr.flags.c_contiguous and _kept(arr, data):
        return arr, dt
    return np.array(arr, dtype=dt.as_numpy(), order="C"), dt


def _kept(arr: np.ndarray[Any, Any], data: Any) -> bool:
    """Whether `arr`, made from `data`, may be held as it is rather than copied: nothing else can write it.

    popxl copies a variable's or constant's data, so that the caller's later writes to it change nothing.
    An array converted here from `data` is new, and a read-only array that owns its memory (such as
    `popxl_addons.layers.init.TruncatedNormal` makes) cannot be written: neither is copied again, which
    at hundreds of millions of parameters is seconds of a model's build and a second copy of each array.
    """
    if arr.base is None and not arr.flags.writeable:
        return True
    if isinstance(data, np.ndarray):
        return not np.may_share_memory(arr, data)
    return isinstance(data, list | tuple | int | float | bool | np.generic)


def _variable_data(
    data: Any,
    dtype: Any | None,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
    downcast: bool = True,
) -> tuple[np.ndarray[Any, Any], dtypes.dtype]:
    """Host data for a variable: an `np.memmap` is kept as it is, so that the variable's host value lives in
    the file (checked as popxl checks it); anything else is copied."""
    if not isinstance(data, np.memmap):
        return _as_array(data, dtype, log2_scale, nan_on_overflow, downcast)
    if dtype is not None and dtypes.as_dtype(dtype).as_numpy() != data.dtype:
        raise ValueError(
            "When passing a memory-mapped NumPy array, the `dtype` parameter must be None or the same as "
            "the array's dtype"
        )
    if not (data.flags.c_contiguous and data.flags.aligned):
        raise ValueError("When passing a memory-mapped NumPy array, it must already be in C-ordered and aligned form.")
    if dtypes.as_dtype(data.dtype).as_numpy() != data.dtype:
        raise ValueError(
            f"When passing a memory-mapped NumPy array, the dtype {dtype} is not supported, as it requires "
            "downcasting the array into a new array with a dtype supported by PopXL."
        )
    return data, dtypes.as_dtype(data.dtype)


def constant(
    data: Any,
    dtype: Any | None = None,
    name: str | None = None,
    downcast: bool = True,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> Constant:
    """An immutable tensor of the current graph holding `data` (64-bit data is narrowed; float8 data is
    converted from numbers scaled by `2**log2_scale`)."""
    arr, dt = _as_array(data, dtype, log2_scale, nan_on_overflow, downcast)
    return Constant(context.gcg(), context.name_scope_prefix() + (name or "t"), dtypes.device_view(arr), dt)


def _variable_args(
    data: Any,
    dtype: Any | None,
    replica_grouping: ReplicaGrouping | None,
    retrieval_mode: str | None,
    name: str | None,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
    downcast: bool = True,
) -> tuple[np.ndarray[Any, Any], dtypes.dtype, ReplicaGrouping, str]:
    g = context.gcg()
    if g is not g.ir.main_graph:
        raise ValueError(f"Variables can only be created in the main graph, not in {g.id!r}")
    arr, dt = _variable_data(data, dtype, log2_scale, nan_on_overflow, downcast)
    grouping = replica_grouping if replica_grouping is not None else g.ir.replica_grouping()
    if isinstance(arr, np.memmap) and not grouping.is_const:
        warnings.warn(
            f"In creation of variable {name or 't'!r}, you have passed np.memmap data and a non-const replica "
            "grouping, which requires a copy of your np.memmap data: the variable is NOT an np.memmap.",
            stacklevel=3,
        )
        arr = np.array(arr)
    if grouping.num_groups > 1 and (arr.ndim == 0 or arr.shape[0] != grouping.num_groups):
        raise ValueError(
            f"Variable {name or 't'!r} has grouping {grouping}: its data needs a leading axis of "
            f"{grouping.num_groups} groups, got shape {arr.shape}"
        )
    mode = retrieval_mode or "one_per_group"
    if mode not in ("one_per_group", "all_replicas"):
        raise ValueError(f"retrieval_mode must be 'one_per_group' or 'all_replicas', got {mode!r}")
    return arr, dt, grouping, mode


def variable(
    data: Any,
    dtype: Any | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None,
    retrieval_mode: str | None = None,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> Variable:
    """A persistent main-graph tensor initialised from host `data`.

    With a replica grouping of more than one group, `data` has a leading axis of
    `num_groups` and replica r starts from `data[group_of(r)]`. Float8 variables take popxl's float8 bytes,
    or numbers converted by `cast(data * 2**log2_scale)`.
    """
    arr, dt, grouping, mode = _variable_args(
        data, dtype, replica_grouping, retrieval_mode, name, log2_scale, nan_on_overflow, downcast
    )
    return Variable(context.gcg(), context.name_scope_prefix() + (name or "t"), arr, dt, grouping, mode)


def _remote(
    data: Any,
    remote_buffer: RemoteBuffer,
    offset: int,
    dtype: Any | None,
    name: str | None,
    replica_grouping: ReplicaGrouping | None,
    retrieval_mode: str | None,
    sharded: bool,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
    downcast: bool = True,
) -> RemoteVariable:
    arr, dt, grouping, mode = _variable_args(
        data, dtype, replica_grouping, retrieval_mode, name, log2_scale, nan_on_overflow, downcast
    )
    group_shape = tuple(arr.shape[1:] if grouping.num_groups > 1 else arr.shape)
    shard_over = None
    if sharded:
        if remote_buffer.ir.replication_factor <= 1:
            raise ValueError(
                f"Replica-sharded variable {name or 't'!r} needs a replication factor above 1, "
                f"got {remote_buffer.ir.replication_factor}"
            )
        shard_over = remote_buffer.shard_over or grouping.group_size
        if grouping.group_size % shard_over:
            raise ValueError(
                f"Replica-sharded variable {name or 't'!r}: its buffer shards over {shard_over} replicas, "
                f"which does not divide the group size {grouping.group_size} of {grouping}"
            )
        shard_shape = (-(-math.prod(group_shape) // shard_over),)
        if not remote_buffer.meta_shape:
            # As in popxl, a plain buffer takes the variable's shape as its meta shape, and one of the whole
            # variable's shape comes to hold its shards.
            remote_buffer.meta_shape = group_shape
            if remote_buffer.tensor_shape == group_shape:
                remote_buffer.set_remote_buffer_info(remote_buffer.tensor_dtype, shard_shape, remote_buffer.entries)
        expected: tuple[tuple[int, ...], dtypes.dtype, tuple[int, ...]] = (shard_shape, dt, group_shape)
        found = (remote_buffer.tensor_shape, remote_buffer.tensor_dtype, remote_buffer.meta_shape)
    else:
        # As in popxl, a buffer of another shape with as many elements holds the variable's elements in order.
        same_size = math.prod(remote_buffer.tensor_shape) == math.prod(group_shape)
        shape = remote_buffer.tensor_shape if same_size else group_shape
        expected = (shape, dt, ())
        found = (remote_buffer.tensor_shape, remote_buffer.tensor_dtype, ())
    if expected != found:
        raise ValueError(
            f"Remote variable {name or 't'!r} needs a buffer of (shape, dtype, meta_shape) {expected}, got {found}"
        )
    if not 0 <= offset < remote_buffer.entries:
        raise ValueError(f"Offset {offset} is outside the {remote_buffer.entries} entries of {remote_buffer}")
    scoped = context.name_scope_prefix() + (name or "t")
    return RemoteVariable(context.gcg(), scoped, arr, dt, grouping, mode, remote_buffer, offset, shard_over)


def remote_variable(
    data: Any,
    remote_buffer: RemoteBuffer,
    offset: int = 0,
    dtype: Any | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None,
    retrieval_mode: str | None = None,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> RemoteVariable:
    """A variable stored in entry `offset` of `remote_buffer` (load it with `ops.remote_load`)."""
    return _remote(
        data,
        remote_buffer,
        offset,
        dtype,
        name,
        replica_grouping,
        retrieval_mode,
        False,
        log2_scale,
        nan_on_overflow,
        downcast,
    )


def remote_replica_sharded_variable(
    data: Any,
    remote_buffer: RemoteBuffer,
    offset: int = 0,
    dtype: Any | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None,
    retrieval_mode: str | None = None,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> RemoteVariable:
    """A variable whose shards over each replica group are stored in entry `offset` of a sharded buffer."""
    return _remote(
        data,
        remote_buffer,
        offset,
        dtype,
        name,
        replica_grouping,
        retrieval_mode,
        True,
        log2_scale,
        nan_on_overflow,
        downcast,
    )


def replica_sharded_variable(
    data: Any,
    dtype: Any | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None,
    shard_over: int | None = None,
    retrieval_mode: str | None = None,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> tuple[RemoteVariable, LoadedVariable]:
    """A replica-sharded variable and its on-device shard.

    As in popxl, the first is the whole variable, kept in a sharded remote
    buffer, for the Session's get and set methods; the second, each replica's
    shard, is what the program uses. Weights going to the device load the
    shard from the buffer; weights going to the host store it back.
    """
    arr, dt = _variable_data(data, dtype, log2_scale, nan_on_overflow, downcast)
    buffer = replica_sharded_buffer(arr.shape, dt, replica_grouping, shard_over)
    whole = remote_replica_sharded_variable(arr, buffer, 0, dt, name, downcast, replica_grouping, retrieval_mode)
    return whole, loaded_variable(whole, whole.name + "_rts")


def loaded_variable(whole: RemoteVariable, name: str | None = None) -> LoadedVariable:
    """The on-device value of remote variable `whole`, loaded when weights go to the device."""
    main = whole.graph.ir.main_graph
    if whole.graph is not main:
        raise ValueError(f"{whole} is not a variable of its Ir's main graph")
    if any(isinstance(v, LoadedVariable) and v.whole is whole for v in main.variables):
        raise ValueError(f"{whole} already has a loaded value")
    return LoadedVariable(main, name or whole.name + "_loaded", whole)
