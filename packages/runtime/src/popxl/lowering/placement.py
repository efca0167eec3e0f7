"""Where per-replica arrays live: one device, one device per replica, or devices across processes.

Arrays carry a leading replica axis. With several processes (`jax.distributed`)
each process feeds and reads only the rows of its own replicas, and values every
process needs (variables, check results) are gathered from all of them.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Sharding, SingleDeviceSharding

from popxl.lowering.replicas import ReplicaMesh

Array = np.ndarray[Any, Any]


class ReplicaPlacement:
    """Moves per-replica arrays between the host and the devices that run the replicas."""

    def __init__(self, mesh: ReplicaMesh, replica_devices: list[Any] | None, device: Any) -> None:
        self.replicas = mesh.replication_factor
        self.multiprocess = jax.process_count() > 1
        # Simulated replicas are laid out with one axis per mesh axis, so the program never reshapes state.
        self.simulated_axes: tuple[int, ...] = ()
        if replica_devices is None:
            if self.multiprocess:
                raise ValueError("Replicas spread over several processes need replica_mode='devices'")
            self.target: Sharding = SingleDeviceSharding(device)
            self.local_rows = list(range(self.replicas))
            self.simulated_axes = mesh.axis_sizes if self.replicas > 1 else ()
        else:
            self.target = mesh.sharding(replica_devices)
            me = jax.process_index()
            self.local_rows = [r for r, d in enumerate(replica_devices) if d.process_index == me]

    @property
    def local_replicas(self) -> int:
        """Replicas whose host data this process provides and receives."""
        return len(self.local_rows)

    def put_local(self, rows: Array, memory_kind: str | None = None) -> jax.Array:
        """An array from this process's replica rows, in the given memory of the devices (their default if None)."""
        target = self.target if memory_kind is None else self.target.with_memory_kind(memory_kind)
        if self.replicas == 1:
            return jax.device_put(rows[0], target)
        if self.simulated_axes:
            return jax.device_put(rows.reshape(*self.simulated_axes, *rows.shape[1:]), target)
        if not self.multiprocess:
            return jax.device_put(rows, target)
        return jax.make_array_from_process_local_data(target, rows, (self.replicas, *rows.shape[1:]))

    def put_all(self, rows: Array, memory_kind: str | None = None) -> jax.Array:
        """An array from the rows of every replica (each process keeps its own)."""
        # Every row is this process's in one process: no host copy of them on their way to the devices.
        mine = rows if len(self.local_rows) == len(rows) else rows[self.local_rows]
        return self.put_local(mine, memory_kind)

    def fetch_local(self, array: jax.Array) -> Array:
        """This process's replica rows of a device array."""
        if self.replicas == 1:
            return np.asarray(array)[None]
        if self.simulated_axes:
            return np.asarray(array).reshape(self.replicas, *array.shape[len(self.simulated_axes) :])
        if not self.multiprocess:
            return np.asarray(array)
        shards = sorted(array.addressable_shards, key=lambda s: s.index[0].start or 0)
        return np.concatenate([np.asarray(s.data) for s in shards])

    def fetch_all(self, array: jax.Array) -> Array:
        """Every replica's rows of a device array, on every process."""
        if self.replicas == 1 or self.simulated_axes:
            return self.fetch_local(array)
        if not self.multiprocess:
            return np.asarray(array)
        return np.asarray(multihost_utils.process_allgather(array, tiled=True))
