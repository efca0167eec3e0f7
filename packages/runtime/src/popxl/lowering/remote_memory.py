"""Moving one entry between a remote buffer's storage and the device.

A remote buffer's storage is `(entries, *shape)` per replica, in device memory
or, with host placement, in JAX's `pinned_host` memory. Only three operations
ever touch host-resident storage: a dynamic slice of one entry, a dynamic
update of one entry, and the copy between memories. Anything else would make
XLA compute on host memory, and XLA:CPU has crashed on scatters into it.

Simulated replicas (`vmap`) would turn a dynamic slice of a replica-batched
buffer into a gather and an update into a scatter. A custom batching rule
keeps them dynamic slices and updates: it slices or updates the same entry
of every replica at once, the replica axes riding along as leading axes.

A buffer on local disk has no storage in the program at all: a load or store
of it is a host callback to its `DiskTier`, and its value in the program is a
token that orders them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap
from jax.experimental import io_callback

from popxl.lowering.disk_tier import DiskTier
from popxl.remote_buffer import RemoteBuffer

_TOKEN = jax.ShapeDtypeStruct((), jnp.int32)


class ReplicaDependentOffsetError(NotImplementedError):
    """A host-resident remote buffer indexed at an offset that differs between simulated replicas."""


def _to(space: Any, host: bool) -> Callable[[jax.Array], jax.Array]:
    if not host:
        return lambda x: x
    return lambda x: jax.device_put(x, space)


def _slice(lead: int, host: bool) -> Callable[[jax.Array, jax.Array], jax.Array]:
    def load(storage: jax.Array, index: jax.Array) -> jax.Array:
        starts = [jnp.int32(0)] * storage.ndim
        starts[lead] = index
        sizes = [*storage.shape[:lead], 1, *storage.shape[lead + 1 :]]
        return _to(jax.memory.Space.Device, host)(jax.lax.dynamic_slice(storage, starts, sizes))

    return load


def _update(lead: int, host: bool) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
    def store(storage: jax.Array, index: jax.Array, value: jax.Array) -> jax.Array:
        starts = [jnp.int32(0)] * storage.ndim
        starts[lead] = index
        update = _to(jax.memory.Space.Host, host)(jnp.expand_dims(value, lead).astype(storage.dtype))
        return jax.lax.dynamic_update_slice(storage, update, starts)

    return store


@functools.cache
def _entry_slice(lead: int, host: bool) -> Any:
    """Entry `index` along axis `lead` of `storage`, the axes before it being replica axes, on the device."""
    load = custom_vmap(_slice(lead, host))

    @load.def_vmap
    def _batched(axis_size: int, in_batched: list[bool], storage: jax.Array, index: jax.Array) -> Any:
        storage_batched, index_batched = in_batched
        if index_batched:
            if host:
                raise ReplicaDependentOffsetError(
                    "Simulated replicas read a host-resident remote buffer at offsets that differ between "
                    "replicas: place it in device memory (Session(..., remote_memory='device'), or the buffer's "
                    "memory='device') or use one device per replica"
                )
            # Replicas at different entries of a device-resident buffer: a gather (JAX's own batching).
            plain = jax.vmap(_slice(lead, host), in_axes=(0 if storage_batched else None, 0))
            return plain(storage, index), True
        if not storage_batched:
            return load(storage, index), False
        return _entry_slice(lead + 1, host)(storage, index), True

    return load


@functools.cache
def _entry_update(lead: int, host: bool) -> Any:
    """`storage` with entry `index` along axis `lead` replaced by the device value `value`."""
    store = custom_vmap(_update(lead, host))

    @store.def_vmap
    def _batched(axis_size: int, in_batched: list[bool], storage: jax.Array, index: jax.Array, value: jax.Array) -> Any:
        storage_batched, index_batched, value_batched = in_batched
        if index_batched or not storage_batched:
            if host:
                raise ReplicaDependentOffsetError(
                    "Simulated replicas write a host-resident remote buffer at offsets that differ between "
                    "replicas: place it in device memory (Session(..., remote_memory='device'), or the buffer's "
                    "memory='device') or use one device per replica"
                )
            axes = (0 if storage_batched else None, 0 if index_batched else None, 0 if value_batched else None)
            # Replicas at different entries of a device-resident buffer: a scatter (JAX's own batching).
            return jax.vmap(_update(lead, host), in_axes=axes)(storage, index, value), True
        if not value_batched:
            value = jnp.broadcast_to(value, (axis_size, *value.shape))
        return _entry_update(lead + 1, host)(storage, index, value), True

    return store


def load_entry(storage: jax.Array, index: jax.Array, host: bool, copy_out: bool = False) -> jax.Array:
    """Entry `index` of a buffer's storage `(entries, *shape)`, as a device value of `shape`; with `copy_out`,
    made a value of its own where it is loaded (see `copied_out`)."""
    entry = jnp.squeeze(_entry_slice(0, host)(storage, index), 0)
    return copied_out(entry, index, storage.shape[0]) if copy_out else entry


def copied_out(entry: jax.Array, index: jax.Array, entries: int) -> jax.Array:
    """`entry`, made a value of its own where it is loaded, which XLA cannot fuse into its readers.

    XLA:CPU fuses a loaded entry's slice, with the cheap arithmetic on it, into every reader. In a loop
    whose body also stores to that buffer, a reader of the old entry that runs beside the store (an Adam
    step updates each moment and then, from the new moments and the old, the weight) cannot be ordered
    before the store by copy insertion, which then copies the whole buffer every iteration: a loop over
    layers held whole buffers where each phase needs one entry. A conditional's result is a value of its
    own; its predicate (the entry exists, always true of a checked offset) is not one XLA folds, and on a
    CPU the conditional costs next to nothing. On a GPU it would wait on the host, so CPU programs alone
    are lowered with it, and only for loads in loops that store to the same buffer.
    """
    return jax.lax.cond(index < entries, lambda e: e, jnp.zeros_like, entry)


def disk_load(
    disk: DiskTier, buffer: RemoteBuffer, token: jax.Array, index: jax.Array, host_effects: bool = True
) -> tuple[jax.Array, jax.Array]:
    """Entry `index` of a buffer on disk from a host callback, and the buffer's next token.

    Each access of a buffer on disk takes the token the one before it gave, so that XLA keeps them in
    program order (JAX's ordered callbacks cannot return to host memory). Without `host_effects` (a program
    traced for its checks alone, which must not move entries) the entry reads as zeros.
    """
    spec = jax.ShapeDtypeStruct(buffer.tensor_shape, buffer.tensor_dtype.as_numpy())
    if not host_effects:
        return jnp.zeros(spec.shape, spec.dtype), token
    bid = buffer.remote_buffer_id

    def load(t: Any, i: Any) -> tuple[Any, Any]:
        return disk.load(bid, int(i)), np.int32(t + 1)

    value, token = io_callback(load, (spec, _TOKEN), token, index)
    return value, token


def disk_store(
    disk: DiskTier,
    buffer: RemoteBuffer,
    token: jax.Array,
    index: jax.Array,
    value: jax.Array,
    host_effects: bool = True,
) -> jax.Array:
    """Replace entry `index` of a buffer on disk by `value` from a host callback; the buffer's next token."""
    if not host_effects:
        return token
    bid = buffer.remote_buffer_id

    def store(t: Any, i: Any, v: Any) -> Any:
        disk.store(bid, int(i), v)
        return np.int32(t + 1)

    result: jax.Array = io_callback(store, _TOKEN, token, index, value.astype(buffer.tensor_dtype.as_numpy()))
    return result


def store_entry(storage: jax.Array, index: jax.Array, value: jax.Array, host: bool) -> jax.Array:
    """A buffer's storage with entry `index` replaced by the device value `value`."""
    result: jax.Array = _entry_update(0, host)(storage, index, value)
    return result
