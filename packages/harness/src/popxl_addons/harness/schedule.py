"""The order of loads, computes and stores in a serialised graph, as it executes.

Which op is a load or a store comes from the resources its op kind declares: a
load reads a remote buffer or a host-to-device stream, a store writes a remote
buffer or a device-to-host stream. Loops are unrolled by their declared trips.
"""

from __future__ import annotations

from dataclasses import dataclass

import popxl
from popxl.extension import Op

LANES = ("load", "compute", "store")


@dataclass(frozen=True)
class Event:
    """One load, compute or store of a step, at a position in execution order."""

    lane: str
    step: int
    position: int
    tile_set: str


def _lane(op: Op) -> str | None:
    if any(isinstance(r, popxl.RemoteBuffer | popxl.DeviceToHostStream) for r in op.writes):
        return "store"
    if any(isinstance(r, popxl.RemoteBuffer | popxl.HostToDeviceStream) for r in op.reads):
        return "load"
    return None


def _walk(graph: popxl.Graph, compute: popxl.Graph, out: list[tuple[str, str]]) -> None:
    for op in graph.ops:
        if op.subgraphs:
            for sub in op.subgraphs:
                if sub.graph is compute:
                    out.append(("compute", op.placement.tile_set))
                    continue
                for _ in range(sub.trips):
                    _walk(sub.graph, compute, out)
            continue
        lane = _lane(op)
        if lane is not None:
            out.append((lane, op.placement.tile_set))


def schedule(serialised: popxl.Graph, compute: popxl.Graph) -> list[Event]:
    """Events of one call of `serialised`: each step's transfers in a lane form one event."""
    raw: list[tuple[str, str]] = []
    _walk(serialised, compute, raw)
    lanes = [lane for lane, _ in raw]
    steps = max(1, lanes.count("compute"))
    per_step = {lane: max(1, lanes.count(lane) // steps) for lane in LANES}
    seen = dict.fromkeys(LANES, 0)
    events: list[Event] = []
    for position, (lane, tile_set) in enumerate(raw):
        if seen[lane] % per_step[lane] == 0:
            events.append(Event(lane, seen[lane] // per_step[lane], position, tile_set))
        seen[lane] += 1
    return events
