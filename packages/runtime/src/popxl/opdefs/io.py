"""Host stream and remote buffer transfers, tile-set copies and initialisation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from popxl.lowering.remote_memory import disk_load, disk_store, load_entry, store_entry
from popxl.lowering.world import HostOutput
from popxl.op import CHECK_RESULT, Aliasing, Attrs, Effects, Op, OpDef, Resource, register
from popxl.opdefs.common import like_input, modifies_first, vjp_grad
from popxl.remote_buffer import RemoteBuffer
from popxl.tensor import Constant, TensorSpec

if TYPE_CHECKING:
    from popxl.lowering.interpreter import LoweringContext


def _stream(attrs: Attrs) -> frozenset[Resource]:
    return frozenset({attrs["stream"]})


def _stream_and_check(attrs: Attrs) -> frozenset[Resource]:
    return frozenset({attrs["stream"], CHECK_RESULT})


def _buffer(attrs: Attrs) -> frozenset[Resource]:
    return frozenset({attrs["buffer"]})


def _check(attrs: Attrs) -> frozenset[Resource]:
    return frozenset({CHECK_RESULT})


def _buffer_and_check(attrs: Attrs) -> frozenset[Resource]:
    return frozenset({attrs["buffer"], CHECK_RESULT})


def _host_load_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    return [attrs["stream"].spec]


def _lower_host_load(ctx: LoweringContext, attrs: Attrs) -> list[jax.Array]:
    stream = attrs["stream"]
    data = ctx.host_inputs[stream.tensor_id]
    cursor = ctx.world.cursor(stream)
    ctx.check(cursor < data.shape[0], f"host_load from stream '{stream.tensor_id}'", cursor, data.shape[0])
    ctx.world.write_cursor(stream, cursor + 1)
    return [load_entry(data, jnp.minimum(cursor, data.shape[0] - 1), ctx.remote_memory == "host")]


HOST_LOAD = register(
    OpDef("host_load", _host_load_infer, _lower_host_load, effects=Effects(reads=_stream, writes=_stream_and_check))
)


def _host_store_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    stream = attrs["stream"]
    (s,) = specs
    if (s.shape, s.dtype) != (stream.shape, stream.dtype):
        raise ValueError(
            f"host_store of a {s.dtype.name} tensor of shape {s.shape} into stream '{stream.tensor_id}' "
            f"which expects {stream.dtype.name} of shape {stream.shape}"
        )
    return []


def _lower_host_store(ctx: LoweringContext, attrs: Attrs, x: jax.Array) -> list[jax.Array]:
    stream = attrs["stream"]
    out, cursor = ctx.world.host_output(stream)
    slots = out.shape[0]
    ctx.check(cursor < slots, f"host_store to stream '{stream.tensor_id}'", cursor, slots)
    values = store_entry(out, jnp.minimum(cursor, slots - 1), x, ctx.host_outputs)
    ctx.world.write_host_output(stream, HostOutput(values, cursor + 1))
    return []


HOST_STORE = register(
    OpDef("host_store", _host_store_infer, _lower_host_store, effects=Effects(reads=_stream, writes=_stream_and_check))
)


def _check_matches(buffer: RemoteBuffer, s: TensorSpec) -> None:
    if (s.shape, s.dtype) != (buffer.tensor_shape, buffer.tensor_dtype):
        raise ValueError(
            f"Tensor of {s.dtype.name} {s.shape} does not match buffer {buffer.remote_buffer_id} "
            f"of {buffer.tensor_dtype.name} {buffer.tensor_shape}"
        )


def _check_offset(s: TensorSpec) -> None:
    if s.shape != () or not s.dtype.is_int:
        raise ValueError(f"A remote buffer offset must be a scalar integer tensor, got {s.dtype.name} {s.shape}")


def _checked_offset(ctx: LoweringContext, buffer: RemoteBuffer, offset: jax.Array, what: str) -> jax.Array:
    entries = buffer.entries
    offset = offset.astype(jnp.int32)
    where = f"{what} remote buffer {buffer.remote_buffer_id}"
    ctx.check((offset >= 0) & (offset < entries), where, offset, entries, buffer.name_entry)
    return jnp.clip(offset, 0, entries - 1)


def _static_offset_check(position: int, what: str) -> Callable[[Op], None]:
    """A Session-time check that a constant offset lies within the buffer's final entries."""

    def check(op: Op) -> None:
        offset = op.inputs[position]
        buffer = op.attrs["buffer"]
        if isinstance(offset, Constant) and not 0 <= int(offset.data) < buffer.entries:
            raise ValueError(
                f"{what} remote buffer {buffer.remote_buffer_id} at constant offset {int(offset.data)}, "
                f"but the buffer has {buffer.entries} entries"
            )

    return check


def _remote_load_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    _check_offset(specs[0])
    buffer = attrs["buffer"]
    return [TensorSpec(buffer.tensor_shape, buffer.tensor_dtype, buffer.meta_shape)]


def _lower_remote_load(ctx: LoweringContext, attrs: Attrs, offset: jax.Array) -> list[jax.Array]:
    buffer = attrs["buffer"]
    index = _checked_offset(ctx, buffer, offset, "remote_load from")
    disk = ctx.on_disk(buffer)
    if disk is not None:
        value, token = disk_load(disk, buffer, ctx.world.buffer(buffer), index, ctx.host_effects)
        ctx.world.write_buffer(buffer, token)
        return [value]
    return [load_entry(ctx.world.buffer(buffer), index, ctx.in_host(buffer), ctx.copies_out(buffer))]


REMOTE_LOAD = register(
    OpDef(
        "remote_load",
        _remote_load_infer,
        _lower_remote_load,
        check=_static_offset_check(0, "remote_load from"),
        effects=Effects(reads=_buffer, writes=_check),
    )
)


def _remote_load_inplace_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    _check_offset(specs[1])
    _check_matches(attrs["buffer"], specs[0])
    return [specs[0]]


def _lower_remote_load_inplace(ctx: LoweringContext, attrs: Attrs, t: jax.Array, offset: jax.Array) -> list[jax.Array]:
    return _lower_remote_load(ctx, attrs, offset)


REMOTE_LOAD_INPLACE = register(
    OpDef(
        "remote_load_",
        _remote_load_inplace_infer,
        _lower_remote_load_inplace,
        output_names=("remote_load_out",),
        check=_static_offset_check(1, "remote_load_ from"),
        effects=Effects(reads=_buffer, writes=_check),
        aliasing=Aliasing(modifies=modifies_first),
    )
)


def _remote_store_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    _check_offset(specs[0])
    _check_matches(attrs["buffer"], specs[1])
    return []


def _lower_remote_store(ctx: LoweringContext, attrs: Attrs, offset: jax.Array, t: jax.Array) -> list[jax.Array]:
    buffer = attrs["buffer"]
    index = _checked_offset(ctx, buffer, offset, "remote_store to")
    disk = ctx.on_disk(buffer)
    if disk is not None:
        ctx.world.write_buffer(buffer, disk_store(disk, buffer, ctx.world.buffer(buffer), index, t, ctx.host_effects))
        return []
    ctx.world.write_buffer(buffer, store_entry(ctx.world.buffer(buffer), index, t, ctx.in_host(buffer)))
    return []


REMOTE_STORE = register(
    OpDef(
        "remote_store",
        _remote_store_infer,
        _lower_remote_store,
        check=_static_offset_check(0, "remote_store to"),
        effects=Effects(reads=_buffer, writes=_buffer_and_check),
    )
)


IO_TILE_COPY = register(
    OpDef(
        "io_tile_copy",
        like_input(0),
        lambda ctx, attrs, x: [x],
        grad=vjp_grad(linear=True),
        departure="a copy: there are no IO tiles",
    )
)


def _init_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    return [TensorSpec(attrs["shape"], attrs["dtype"], attrs["meta_shape"])]


INIT = register(
    OpDef(
        "init",
        _init_infer,
        lambda ctx, attrs: [jnp.zeros(attrs["shape"], attrs["dtype"].as_numpy())],
        output_names=("init_out",),
    )
)
