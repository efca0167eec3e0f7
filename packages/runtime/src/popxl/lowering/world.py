"""The world: program-wide state that lowerings read and replace, keyed by the resources ops declare."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import jax

from popxl.op import CHECK_RESULT, Resource
from popxl.remote_buffer import RemoteBuffer
from popxl.streams import DeviceToHostStream, HostToDeviceStream


class HostOutput(NamedTuple):
    """A device-to-host stream's transfers so far: one slot per host transfer, and the next slot."""

    values: jax.Array
    cursor: jax.Array


class CheckState(NamedTuple):
    """The first failed run-time check: its code (0: none failed) and the offending index."""

    code: jax.Array
    offending: jax.Array


class World:
    """The value of every resource while a program is traced, recording which ones were replaced.

    A remote buffer's value is its storage `(entries, *shape)`; a host-to-device
    stream's is its cursor; a device-to-host stream's a `HostOutput`; the check
    result's a `CheckState`.
    """

    def __init__(self, values: Mapping[Resource, Any]) -> None:
        self._values: dict[Resource, Any] = dict(values)
        self.written: set[Resource] = set()

    def __contains__(self, resource: object) -> bool:
        return resource in self._values

    def copy(self) -> World:
        """A world with the same values and nothing written yet."""
        return World(self._values)

    def values(self, resources: Iterable[Resource]) -> list[Any]:
        """The current values of `resources`."""
        return [self._values[r] for r in resources]

    def replace(self, resources: Iterable[Resource], values: Iterable[Any]) -> None:
        """Replace the values of `resources`."""
        for r, v in zip(resources, values):
            self._write(r, v)

    def _write(self, resource: Resource, value: Any) -> None:
        if resource not in self._values:
            raise KeyError(f"{resource!r} is not part of this program's world")
        self._values[resource] = value
        self.written.add(resource)

    def buffer(self, buffer: RemoteBuffer) -> jax.Array:
        """The storage of a remote buffer."""
        value: jax.Array = self._values[buffer]
        return value

    def write_buffer(self, buffer: RemoteBuffer, storage: jax.Array) -> None:
        """Replace the storage of a remote buffer."""
        self._write(buffer, storage)

    def cursor(self, stream: HostToDeviceStream) -> jax.Array:
        """The index of the next transfer of a host-to-device stream."""
        value: jax.Array = self._values[stream]
        return value

    def write_cursor(self, stream: HostToDeviceStream, cursor: jax.Array) -> None:
        """Advance a host-to-device stream."""
        self._write(stream, cursor)

    def host_output(self, stream: DeviceToHostStream) -> HostOutput:
        """The transfers of a device-to-host stream so far."""
        value: HostOutput = self._values[stream]
        return value

    def write_host_output(self, stream: DeviceToHostStream, output: HostOutput) -> None:
        """Replace the transfers of a device-to-host stream."""
        self._write(stream, output)

    @property
    def check_state(self) -> CheckState:
        """The first failed run-time check so far."""
        value: CheckState = self._values[CHECK_RESULT]
        return value

    def write_check_state(self, state: CheckState) -> None:
        """Record a failed run-time check."""
        self._write(CHECK_RESULT, state)
