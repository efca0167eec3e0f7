"""Host stream and remote buffer transfers, tile-set copies and initialisation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from popxl.op import Attrs, Op, OpDef, register
from popxl.opdefs.common import like_input, vjp_grad
from popxl.tensor import Constant, TensorSpec


def _host_load_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    return [attrs["stream"].spec]


def _lower_host_load(ctx: Any, op: Op) -> list[jax.Array]:
    sid = op.attrs["stream"].tensor_id
    data = ctx.host_inputs[sid]
    cursor = ctx.world["in_cursor"][sid]
    ctx.check(cursor < data.shape[0], f"host_load from stream '{sid}'", cursor, data.shape[0])
    ctx.world["in_cursor"][sid] = cursor + 1
    return [jax.lax.dynamic_index_in_dim(data, jnp.minimum(cursor, data.shape[0] - 1), keepdims=False)]


HOST_LOAD = register(OpDef("host_load", _host_load_infer, _lower_host_load, side_effects=True))


def _host_store_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    stream = attrs["stream"]
    (s,) = specs
    if (s.shape, s.dtype) != (stream.shape, stream.dtype):
        raise ValueError(
            f"host_store of a {s.dtype.name} tensor of shape {s.shape} into stream '{stream.tensor_id}' "
            f"which expects {stream.dtype.name} of shape {stream.shape}"
        )
    return []


def _lower_host_store(ctx: Any, op: Op, x: jax.Array) -> list[jax.Array]:
    sid = op.attrs["stream"].tensor_id
    out = ctx.world["out"][sid]
    cursor = ctx.world["out_cursor"][sid]
    ctx.check(cursor < out.shape[0], f"host_store to stream '{sid}'", cursor, out.shape[0])
    ctx.world["out"][sid] = jax.lax.dynamic_update_index_in_dim(out, x, jnp.minimum(cursor, out.shape[0] - 1), 0)
    ctx.world["out_cursor"][sid] = cursor + 1
    return []


HOST_STORE = register(OpDef("host_store", _host_store_infer, _lower_host_store, side_effects=True))


def buffer_key(buffer: Any) -> str:
    """The key of a remote buffer's storage in the lowered state."""
    return f"buffer{buffer.remote_buffer_id}"


def _check_matches(buffer: Any, s: TensorSpec) -> None:
    if (s.shape, s.dtype) != (buffer.tensor_shape, buffer.tensor_dtype):
        raise ValueError(
            f"Tensor of {s.dtype.name} {s.shape} does not match buffer {buffer.remote_buffer_id} "
            f"of {buffer.tensor_dtype.name} {buffer.tensor_shape}"
        )


def _check_offset(s: TensorSpec) -> None:
    if s.shape != () or not s.dtype.is_int:
        raise ValueError(f"A remote buffer offset must be a scalar integer tensor, got {s.dtype.name} {s.shape}")


def _checked_offset(ctx: Any, op: Op, offset: jax.Array, what: str) -> tuple[jax.Array, jax.Array]:
    buffer = op.attrs["buffer"]
    store = ctx.world["buffers"][buffer_key(buffer)]
    entries = store.shape[0]
    offset = offset.astype(jnp.int32)
    ctx.check((offset >= 0) & (offset < entries), f"{what} remote buffer {buffer.remote_buffer_id}", offset, entries)
    return store, jnp.clip(offset, 0, entries - 1)


def _static_offset_check(position: int, what: str) -> Any:
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


def _lower_remote_load(ctx: Any, op: Op, offset: jax.Array) -> list[jax.Array]:
    store, index = _checked_offset(ctx, op, offset, "remote_load from")
    return [jax.lax.dynamic_index_in_dim(store, index, keepdims=False)]


REMOTE_LOAD = register(
    OpDef(
        "remote_load",
        _remote_load_infer,
        _lower_remote_load,
        side_effects=True,
        check=_static_offset_check(0, "remote_load from"),
    )
)


def _remote_load_inplace_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    _check_offset(specs[1])
    _check_matches(attrs["buffer"], specs[0])
    return [specs[0]]


def _lower_remote_load_inplace(ctx: Any, op: Op, t: jax.Array, offset: jax.Array) -> Any:
    (out,) = _lower_remote_load(ctx, op, offset)
    return [out], {0: out}


REMOTE_LOAD_INPLACE = register(
    OpDef(
        "remote_load_",
        _remote_load_inplace_infer,
        _lower_remote_load_inplace,
        side_effects=True,
        output_names=("remote_load_out",),
        check=_static_offset_check(1, "remote_load_ from"),
    )
)


def _remote_store_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    _check_offset(specs[0])
    _check_matches(attrs["buffer"], specs[1])
    return []


def _lower_remote_store(ctx: Any, op: Op, offset: jax.Array, t: jax.Array) -> list[jax.Array]:
    store, index = _checked_offset(ctx, op, offset, "remote_store to")
    key = buffer_key(op.attrs["buffer"])
    ctx.world["buffers"][key] = jax.lax.dynamic_update_index_in_dim(store, t.astype(store.dtype), index, 0)
    return []


REMOTE_STORE = register(
    OpDef(
        "remote_store",
        _remote_store_infer,
        _lower_remote_store,
        side_effects=True,
        check=_static_offset_check(0, "remote_store to"),
    )
)


IO_TILE_COPY = register(OpDef("io_tile_copy", like_input(0), lambda ctx, op, x: [x], grad=vjp_grad(linear=True)))


def _init_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    return [TensorSpec(attrs["shape"], attrs["dtype"], attrs["meta_shape"])]


INIT = register(
    OpDef(
        "init",
        _init_infer,
        lambda ctx, op: [jnp.zeros(op.attrs["shape"], op.attrs["dtype"].as_numpy())],
        output_names=("init_out",),
    )
)
