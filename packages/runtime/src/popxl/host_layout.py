"""The layout of a program's host arrays: popxl's transfers and replica axes, in one place."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from popxl.ir import Ir

Array = np.ndarray[Any, Any]


class HostLayout:
    """How one stream's host data is laid out for `Session.run`, as popxl lays it out.

    A host array has a leading transfers axis when `num_host_transfers > 1`,
    then a replica axis when this process runs more than one replica, then
    the stream's shape. As in popxl, the replica axis counts this process's
    replicas (`ir.instance_replication_factor`), not the program's: under
    poprun an instance with one replica feeds arrays without one. The program
    itself takes every stream as `(local replicas, transfers, *shape)`:
    "replica-major".
    """

    def __init__(self, num_host_transfers: int, replication_factor: int, local_replicas: int) -> None:
        self.num_host_transfers = num_host_transfers
        self.replication_factor = replication_factor
        self.local_replicas = local_replicas

    @classmethod
    def of(cls, ir: Ir) -> HostLayout:
        """The layout of `ir`'s streams in this process."""
        return cls(ir.num_host_transfers, ir.replication_factor, ir.instance_replication_factor)

    @property
    def _transfers_axis(self) -> bool:
        return self.num_host_transfers > 1

    @property
    def _replica_axis(self) -> bool:
        # popxl's Session sizes this axis, and decides whether it is there, from the instance's replicas.
        return self.local_replicas > 1

    def shape(self, stream_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The host shape of a stream of shape `stream_shape`."""
        transfers = (self.num_host_transfers,) if self._transfers_axis else ()
        replicas = (self.local_replicas,) if self._replica_axis else ()
        return (*transfers, *replicas, *stream_shape)

    def accepts(self, stream_shape: tuple[int, ...], data_shape: tuple[int, ...]) -> bool:
        """Whether host data of `data_shape` can feed a stream, as popxl decides: extra transfers are
        ignored, and a one-element stream takes any per-transfer shape of one element."""
        want = self.shape(stream_shape)
        lead = len(want) - len(stream_shape)
        if math.prod(stream_shape) == 1 and len(data_shape) >= lead and math.prod(data_shape[lead:]) == 1:
            data_shape = (*data_shape[:lead], *stream_shape)
        if not self._transfers_axis:
            return data_shape == want
        return len(data_shape) == len(want) and data_shape[1:] == want[1:] and data_shape[0] >= want[0]

    def conform(self, stream_shape: tuple[int, ...], data: Array) -> Array:
        """Accepted host data with the stream's own shape after the transfers and replica axes."""
        lead = len(self.shape(stream_shape)) - len(stream_shape)
        return data.reshape((*data.shape[:lead], *stream_shape))

    def to_replica_major(self, data: Array) -> Array:
        """Host data (accepted for its stream) as the program takes it: `(local replicas, transfers, *shape)`."""
        arr = data[: self.num_host_transfers] if self._transfers_axis else data[None]
        arr = np.swapaxes(arr, 0, 1) if self._replica_axis else arr[None]
        return np.ascontiguousarray(arr)

    def from_replica_major(self, values: Array) -> Array:
        """A program output `(local replicas, transfers, *shape)` in the host layout."""
        arr = np.swapaxes(values, 0, 1) if self._replica_axis else values[0]
        return np.array(arr if self._transfers_axis else arr[0], order="C")

    def from_transfers_major(self, values: Array) -> Array:
        """Data for every transfer and local replica, `(transfers, local replicas, *shape)`, in the host layout."""
        arr = values if self._replica_axis else values[:, 0]
        return np.ascontiguousarray(arr if self._transfers_axis else arr[0])
