"""The state layer: where each variable and remote buffer of a program lives, and its host <-> device values.

A program's state is two maps of per-replica arrays: "vars", the variables the
step carries, by tensor id, and "buffers", each remote buffer's storage
`(entries, *shape)`, by `buffer_key`. Each variable kind has a slot that says
where it lives there and how its host value is read and written:

- a `Variable` is carried in "vars", one row per replica of its host value;
- a `RemoteVariable` lives in its buffer's entry (sharded over its shard
  domain when it is sharded); while a `LoadedVariable` of it exists, that one
  holds its current value, so it is read from there and written to both;
- a `LoadedVariable` is carried in "vars" and has no host value of its own: it
  starts from its whole variable's entry;
- a remote buffer on disk (`DiskTier`) is in neither map: the step reaches its
  file through host callbacks, and a remote variable there lives in its file's
  entry. Read back while detached, its host value is a read-only view of that
  entry (file-backed memory), so that state larger than the machine's memory
  is never read whole into it.

The program and the Session ask the layer; nothing else tells variable kinds apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import jax
import numpy as np

from popxl.lowering import host_rows
from popxl.lowering.disk_tier import DiskTier
from popxl.lowering.placement import ReplicaPlacement
from popxl.remote_buffer import RemoteBuffer
from popxl.tensor import LoadedVariable, RemoteVariable, Tensor, Variable

State = dict[str, dict[str, jax.Array]]
PARTS = ("vars", "buffers")
Array = np.ndarray[Any, Any]
# JAX's memory kind for a remote buffer's storage (None: the devices' default memory).
MemoryKindOf = Callable[[RemoteBuffer], str | None]


class Entry(NamedTuple):
    """One array of a program's state: its name as a user names it, bytes, JAX memory kind (None: the devices'
    default memory) and the variables whose host values `StateLayout.initial` places in it."""

    name: str
    nbytes: int
    memory_kind: str | None
    variables: list[Variable]


class Handover(Protocol):
    """Who gives `StateLayout.initial` the host values it places, and takes them back should it fail."""

    def releases(self, variable: Variable) -> bool:
        """Whether the host value of `variable` goes once it is placed (and its memory can be used again)."""

    def placed(self, variables: list[Variable]) -> None:
        """These variables' values are on the devices."""

    def restore(self, values: dict[Variable, Array]) -> None:
        """Placing failed: the values of the variables `placed` was told of, read back from the devices."""


def buffer_key(buffer: RemoteBuffer) -> str:
    """The key of a remote buffer's storage in the program's state."""
    return f"buffer{buffer.remote_buffer_id}"


class _Slot:
    """A variable with a host value: where it lives in the state and how its host value maps onto it."""

    def __init__(self, var: Variable, replicas: int) -> None:
        self.var = var
        self.replicas = replicas

    def initialise(self, host: Array, rows: dict[str, Array], buffers: dict[str, Array]) -> None:
        """Place the host value in the initial host-side state: `rows` by tensor id, `buffers` by key."""
        rows[self.var.id] = host_rows.replica_view(self.var, host, self.replicas)

    def write(self, state: State, host: Array, placement: ReplicaPlacement, memory_kind: MemoryKindOf) -> None:
        """Replace the variable's value in the device `state` (updated in place) by `host`."""
        state["vars"][self.var.id] = placement.put_all(host_rows.replica_view(self.var, host, self.replicas))

    def replica_rows(self, state: State, placement: ReplicaPlacement) -> Array:
        """Every replica's value, `(replicas, *group shape)`, from the device state."""
        return placement.fetch_all(state["vars"][self.var.id])

    def stored(self, state: State, placement: ReplicaPlacement) -> Array:
        """`replica_rows` from where `initial` placed the value."""
        return self.replica_rows(state, placement)


class _RemoteSlot(_Slot):
    """A remote variable: its buffer's entry, and its loaded value while one exists."""

    def __init__(self, var: RemoteVariable, replicas: int, loaded: LoadedVariable | None) -> None:
        super().__init__(var, replicas)
        self.remote = var
        self.loaded = loaded

    def initialise(self, host: Array, rows: dict[str, Array], buffers: dict[str, Array]) -> None:
        stored = host_rows.stored_rows(self.remote, host, self.replicas)
        buffers[buffer_key(self.remote.buffer)][:, self.remote.offset] = stored
        if self.loaded is not None:
            rows[self.loaded.id] = stored

    def write(self, state: State, host: Array, placement: ReplicaPlacement, memory_kind: MemoryKindOf) -> None:
        key = buffer_key(self.remote.buffer)
        entries = placement.fetch_all(state["buffers"][key]).copy()
        entries[:, self.remote.offset] = host_rows.stored_rows(self.remote, host, self.replicas)
        state["buffers"][key] = placement.put_all(entries, memory_kind(self.remote.buffer))
        if self.loaded is not None:
            state["vars"][self.loaded.id] = placement.put_all(entries[:, self.remote.offset])

    def replica_rows(self, state: State, placement: ReplicaPlacement) -> Array:
        if self.loaded is not None:
            entries = placement.fetch_all(state["vars"][self.loaded.id])
            return host_rows.entry_values(self.remote, entries)
        return self.stored(state, placement)

    def stored(self, state: State, placement: ReplicaPlacement) -> Array:
        entries = placement.fetch_all(state["buffers"][buffer_key(self.remote.buffer)])[:, self.remote.offset]
        return host_rows.entry_values(self.remote, entries)


class _DiskSlot(_RemoteSlot):
    """A remote variable whose buffer is on disk: its file's entry, and its loaded value while one exists."""

    def __init__(self, var: RemoteVariable, replicas: int, loaded: LoadedVariable | None, disk: DiskTier) -> None:
        super().__init__(var, replicas, loaded)
        self.disk = disk

    @property
    def _bid(self) -> int:
        return self.remote.buffer.remote_buffer_id

    def initialise(self, host: Array, rows: dict[str, Array], buffers: dict[str, Array]) -> None:
        stored = host_rows.stored_rows(self.remote, host, self.replicas)
        if not stored.any():  # optimizer state starts at zeros, which an entry never written reads as
            self.disk.zero_entry(self._bid, self.remote.offset)
        elif not self.disk.is_view(self._bid, self.remote.offset, host):
            self.disk.write_entry(self._bid, self.remote.offset, stored[0], commit=False)
        if self.loaded is not None:
            rows[self.loaded.id] = stored

    def write(self, state: State, host: Array, placement: ReplicaPlacement, memory_kind: MemoryKindOf) -> None:
        stored = host_rows.stored_rows(self.remote, host, self.replicas)
        self.disk.write_entry(self._bid, self.remote.offset, stored[0])
        if self.loaded is not None:
            state["vars"][self.loaded.id] = placement.put_all(stored)

    def stored(self, state: State, placement: ReplicaPlacement) -> Array:
        return host_rows.entry_values(self.remote, self.disk.entry_view(self._bid, self.remote.offset)[None])


class StateLayout:
    """The state of one program: a slot per variable with a host value, and the remote buffers.

    With a `disk` tier, the remote buffers `on_disk` picks live in its files (`disk.buffers`), the rest in
    `buffers`.
    """

    def __init__(
        self,
        variables: Sequence[Variable],
        buffers: Sequence[RemoteBuffer],
        replicas: int,
        written: Iterable[Any],
        disk: DiskTier | None = None,
        on_disk: Callable[[RemoteBuffer], bool] = lambda b: False,
    ) -> None:
        self.replicas = replicas
        every = list(buffers)
        for v in variables:
            if isinstance(v, RemoteVariable) and not any(v.buffer is b for b in every):
                every.append(v.buffer)
        self.disk = disk if disk is not None and any(on_disk(b) for b in every) else None
        self.buffers = [b for b in every if self.disk is None or not on_disk(b)]
        if self.disk is not None:
            self.disk.buffers = [b for b in every if on_disk(b)]
        loaded = {v.whole: v for v in variables if isinstance(v, LoadedVariable)}
        self._slots: dict[Variable, _Slot] = {}
        for v in variables:
            if isinstance(v, RemoteVariable):
                if self.disk is not None and not any(v.buffer is b for b in self.buffers):
                    self._slots[v] = _DiskSlot(v, replicas, loaded.get(v), self.disk)
                else:
                    self._slots[v] = _RemoteSlot(v, replicas, loaded.get(v))
            elif not isinstance(v, LoadedVariable):
                self._slots[v] = _Slot(v, replicas)
        self.variables: list[Variable] = list(self._slots)
        # Remote variables live in their buffer's entry; the rest are state the step carries.
        self.carried: list[Variable] = [v for v in variables if not isinstance(v, RemoteVariable)]
        written = set(written)
        self.written_variables = [v for v in self.carried if v in written]
        self.written_buffers = [b for b in self.buffers if b in written]
        self._written = {
            "vars": sorted(v.id for v in self.written_variables),
            "buffers": sorted(buffer_key(b) for b in self.written_buffers),
        }

    def host_variable(self, var: Tensor, what: str) -> Variable:
        """`var` as a variable with a host value in this program, or a clear error for `what`."""
        if isinstance(var, LoadedVariable):
            raise TypeError(f"{var} is the on-device value of {var.whole}: {what} {var.whole.name!r} instead")
        if not isinstance(var, Variable):
            raise TypeError(f"Tensor {getattr(var, 'id', var)} is not of type Variable")
        if var not in self._slots:
            raise ValueError(f"{var.id} is not a variable of this session's Ir")
        return var

    def initial(
        self,
        host: Mapping[Variable, Array],
        placement: ReplicaPlacement,
        memory_kind: MemoryKindOf,
        handover: Handover | None = None,
    ) -> State:
        """Device state: variables from `host`, remote buffers zeroed (but for remote variables' entries).

        Arrays are placed in the order of `sizes`, each made on the host just before it is placed. With a
        `handover`, its `placed` is told each array's variables once their values are on the devices, so that
        their host values can go before the next array is made; should a placement fail, the values of the
        variables it was told of are read back from the devices and given to its `restore`.
        """
        r = self.replicas
        state: State = {"vars": {}, "buffers": {}}
        told: list[Variable] = []

        def placed(variables: list[Variable]) -> None:
            if handover is not None and variables:
                told.extend(variables)
                handover.placed(variables)

        try:
            for b in self.buffers:
                key = buffer_key(b)
                staging = {key: np.zeros((r, b.entries, *b.tensor_shape), b.tensor_dtype.as_numpy())}
                rows: dict[str, Array] = {}
                slots = [s for s in self._slots.values() if isinstance(s, _RemoteSlot) and s.remote.buffer is b]
                for slot in slots:
                    slot.initialise(host[slot.var], rows, staging)
                # Placed before the next is made: a copy still under way would keep its staging alive.
                state["buffers"][key] = jax.block_until_ready(placement.put_all(staging.pop(key), memory_kind(b)))
                for var_id, value in rows.items():  # the loaded values of remote variables, carried
                    state["vars"][var_id] = placement.put_all(value)
                del staging, rows
                placed([slot.var for slot in slots])
            if self.disk is not None:
                self._place_on_disk(host, state, placement, placed)
            for v in self.carried:
                if v.id not in state["vars"]:
                    rows = {}
                    self._slots[v].initialise(host[v], rows, {})
                    state["vars"][v.id] = placement.put_all(rows.pop(v.id))
                    placed([v])
        except BaseException:
            if told:
                assert handover is not None
                handover.restore({v: host_rows.host_values(v, self._slots[v].stored(state, placement)) for v in told})
            raise
        return {"vars": {v.id: state["vars"][v.id] for v in self.carried}, "buffers": state["buffers"]}

    def _place_on_disk(
        self,
        host: Mapping[Variable, Array],
        state: State,
        placement: ReplicaPlacement,
        placed: Callable[[list[Variable]], None],
    ) -> None:
        """Make the disk tier's files, each entry zero but the remote variables' values, written one at a time."""
        assert self.disk is not None
        slots = [s for s in self._slots.values() if isinstance(s, _DiskSlot)]
        keep: dict[int, set[int]] = {}
        for slot in slots:
            keep.setdefault(slot._bid, set()).add(slot.remote.offset)
        self.disk.open(keep)
        for slot in slots:
            rows: dict[str, Array] = {}
            slot.initialise(host[slot.var], rows, {})
            for var_id, value in rows.items():
                state["vars"][var_id] = placement.put_all(value)
            placed([slot.var])
        self.disk.commit()

    def sizes(self, memory_kind: MemoryKindOf, replicas: int) -> list[Entry]:
        """What `initial` allocates for `replicas` replicas, in the order it places them."""
        out = []
        for b in self.buffers:
            nbytes = replicas * b.entries * math.prod(b.tensor_shape) * np.dtype(b.tensor_dtype.as_numpy()).itemsize
            variables = [s.var for s in self._slots.values() if isinstance(s, _RemoteSlot) and s.remote.buffer is b]
            out.append(Entry(self.entry_name("buffers", buffer_key(b)), nbytes, memory_kind(b), variables))
        for v in self.carried:
            nbytes = replicas * math.prod(v.shape) * np.dtype(v.dtype.as_numpy()).itemsize
            out.append(Entry(self.entry_name("vars", v.id), nbytes, None, [v] if v in self._slots else []))
        return out

    def entry_name(self, part: str, key: str) -> str:
        """A state entry as a user names it: the variable, or the remote buffer with its entries' shape."""
        if part == "vars":
            return f"variable {key!r}"
        buffer = next(b for b in self.buffers if buffer_key(b) == key)
        return f"remote buffer {buffer.remote_buffer_id} ({buffer.entries} x {buffer.tensor_shape})"

    def with_variables(
        self, state: State, host: Mapping[Variable, Array], placement: ReplicaPlacement, memory_kind: MemoryKindOf
    ) -> State:
        """`state` with the given variables replaced from host values."""
        new: State = {part: dict(state[part]) for part in PARTS}
        for v, data in host.items():
            self._slots[v].write(new, data, placement, memory_kind)
        return new

    def replica_rows(self, state: State, var: Variable, placement: ReplicaPlacement) -> Array:
        """Every replica's value of `var`, `(replicas, *group shape)`, from device state."""
        return self._slots[var].replica_rows(state, placement)

    def read(self, state: State, variables: Iterable[Variable], placement: ReplicaPlacement) -> dict[Variable, Array]:
        """Host values of `variables` from device state (a remote variable's from its loaded value, if any)."""
        return {v: host_rows.host_values(v, self.replica_rows(state, v, placement)) for v in variables}

    def replica_values(self, var: Variable, host: Array) -> Array:
        """Per-replica values `(replicas, *shape)` of `var` from its host layout."""
        return host_rows.replica_values(var, host, self.replicas)

    def split(self, state: State) -> tuple[State, State]:
        """`state` as (the entries the program writes, the rest)."""
        written = {part: {k: state[part][k] for k in self._written[part]} for part in PARTS}
        readonly = {part: {k: v for k, v in state[part].items() if k not in written[part]} for part in PARTS}
        return written, readonly


def merged(written: State, readonly: State) -> State:
    """The whole state from the entries a run wrote and the rest."""
    return {part: {**readonly[part], **written[part]} for part in PARTS}
