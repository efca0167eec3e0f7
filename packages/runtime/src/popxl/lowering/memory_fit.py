"""A Program's memory fit: what attaching and each run allocate, checked with `fit` before they allocate it.

Attaching places the state's arrays one at a time (`StateLayout.initial`), so what it needs of host memory is
its peak, not its sum; a run allocates what its compiled step's `Footprint` says, its host stream data and the
disk tier's staging. XLA's own out-of-memory error (a GPU's) is raised as the same `OutOfMemoryError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import jax
import numpy as np

from popxl.errors import OutOfMemoryError
from popxl.lowering import fit
from popxl.lowering.disk_tier import DiskTier
from popxl.lowering.memory import Footprint
from popxl.lowering.state import Entry, Handover, StateLayout
from popxl.tensor import Variable

T = TypeVar("T")

ADVICE = (
    "To fit: serialise over more steps (batch_serialise's `steps`) so that each holds a smaller micro-batch, "
    "run fewer samples per run (num_host_transfers, the micro-batch size), or, on an accelerator, keep remote "
    'buffers and stream data in host memory (Session(remote_memory="host")).'
)
STATE_ADVICE = (
    "To fit: fewer or smaller variables and remote buffers (fewer entries, or sharded over replicas), or, on "
    'an accelerator, remote buffers in host memory (Session(remote_memory="host")).'
)


class MemoryFit:
    """The memory checks of a Program on `device`, whose process runs it on `devices` devices alike."""

    def __init__(self, device: Any, devices: int, layout: StateLayout, disk: DiskTier | None) -> None:
        self.device = device
        self.devices = devices
        self.layout = layout
        self.disk = disk

    def attach(
        self,
        host: Mapping[Variable, np.ndarray[Any, Any]],
        entries: list[Entry],
        handover: Handover | None,
        place: Callable[[], T],
    ) -> T:
        """`place()`, which places the state `entries` lists, refused with `OutOfMemoryError` before anything is
        allocated where the machine cannot hold it. The host values `handover` releases as they are placed
        count as host memory given back along the way."""
        devices = self.devices
        held = [fit.Buffer(e.name, e.nbytes // devices, "device" if e.memory_kind is None else "host") for e in entries]
        allocations = {m: sum(b.nbytes for b in held if b.memory == m) for m in ("device", "host")}
        # Entries are placed in order, each releasing its variables' host values once placed: host memory
        # given back for the next. What attaching needs of host memory is its peak, not its sum.
        on_cpu = self.device.platform == "cpu"  # a CPU device's memory is the host's
        peak = total = 0
        for b, e in zip(held, entries):
            if on_cpu or b.memory == "host":
                peak = max(peak, total + b.nbytes)
                releases = [v for v in e.variables if handover is not None and handover.releases(v)]
                total += b.nbytes - sum(host[v].nbytes for v in releases) // devices
        credit = sum(b.nbytes for b in held if on_cpu or b.memory == "host") - peak
        from_device = min(credit, allocations["device"]) if on_cpu else 0
        allocations["device"] -= from_device
        allocations["host"] -= credit - from_device
        what = "Attaching the Session (its variables and remote buffers)"
        if self.disk is not None:
            self.disk.check_space()  # before anything is written, as the memory check
            allocations = self.with_staging(allocations)
            held.append(fit.Buffer(f"disk tier staging ({self.disk.folder})", self.disk.staging_bytes(), "host"))
        fit.require_fit(what, self.device, allocations, lambda: held, STATE_ADVICE, devices)
        return self.translating_oom(what, allocations, lambda: held, place, STATE_ADVICE)

    def require_inputs(self, inputs: dict[str, np.ndarray[Any, Any]], memory: str) -> None:
        """Raise `OutOfMemoryError` if a run's host stream data would not fit `memory` ("device" or "host")."""
        held = [fit.Buffer(f"host stream {k!r} data", a.nbytes // self.devices, memory) for k, a in inputs.items()]
        what = "Session.run, placing its host stream data,"
        allocations = {memory: sum(b.nbytes for b in held)}
        fit.require_fit(what, self.device, allocations, lambda: held, ADVICE, self.devices)

    def require_run(self, footprint: Footprint, arguments: tuple[Any, ...], hlo: Callable[[], str]) -> None:
        """Raise `OutOfMemoryError` if a run of the step (its `footprint`, its HLO text from `hlo()`) with these
        arguments would allocate more than the machine has."""
        largest = lambda: self.largest(arguments, hlo)  # noqa: E731
        fit.require_fit("Session.run", self.device, self.run_allocations(footprint), largest, ADVICE, self.devices)

    def running(
        self, footprint: Footprint, arguments: tuple[Any, ...], hlo: Callable[[], str], run: Callable[[], T]
    ) -> T:
        """`run()`, a run of the step, with XLA's out-of-memory error raised as `OutOfMemoryError`."""
        largest = lambda: self.largest(arguments, hlo)  # noqa: E731
        return self.translating_oom("Session.run", self.run_allocations(footprint), largest, run)

    def run_allocations(self, footprint: Footprint) -> dict[str, int]:
        """What a run allocates per memory: the step's footprint and the disk tier's staging."""
        return self.with_staging(footprint.allocations())

    def with_staging(self, allocations: dict[str, int]) -> dict[str, int]:
        """`allocations` with the disk tier's staging buffers in host memory (none without a disk tier)."""
        if self.disk is None:
            return allocations
        return {**allocations, "host": allocations.get("host", 0) + self.disk.staging_bytes()}

    def largest(self, arguments: tuple[Any, ...], hlo: Callable[[], str]) -> list[fit.Buffer]:
        """The largest buffers of a run: its state and stream data by name, and the largest values XLA computes."""
        written, readonly, inputs = arguments
        held = [
            fit.Buffer.of_array(self.layout.entry_name(part, key), a)
            for state in (written, readonly)
            for part, entries in state.items()
            for key, a in entries.items()
        ]
        held += [fit.Buffer.of_array(f"host stream {k!r} data", a) for k, a in inputs.items()]
        return held + fit.largest_temporaries(hlo())

    def translating_oom(
        self, what: str, allocations: dict[str, int], held: fit.Held, action: Callable[[], T], advice: str = ADVICE
    ) -> T:
        """`action()`, with XLA's own out-of-memory error (a GPU's) raised as the same `OutOfMemoryError`."""
        try:
            return action()
        except jax.errors.JaxRuntimeError as e:
            if "RESOURCE_EXHAUSTED" not in str(e):
                raise
            available = fit.device_available(self.device)
            outcome = "XLA ran out of memory; state the run donated may be lost."
            message = fit.out_of_memory_message(what, self.device, allocations, available, held, advice, outcome)
            raise OutOfMemoryError(f"{message}\nXLA: {str(e).splitlines()[0]}") from e
