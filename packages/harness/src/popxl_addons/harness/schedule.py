"""The order of loads, computes and stores in a serialised graph, as it executes."""

from __future__ import annotations

from dataclasses import dataclass

import popxl

LANES = ("load", "compute", "store")
_KIND = {"host_load": "load", "remote_load": "load", "host_store": "store", "remote_store": "store"}


@dataclass(frozen=True)
class Event:
    """One load, compute or store of a step, at a position in execution order."""

    lane: str
    step: int
    position: int
    tile_set: str


def _walk(graph: popxl.Graph, compute: popxl.Graph, out: list[tuple[str, str]]) -> None:
    for op in graph.ops:
        called = op.attrs.get("graph")
        if op.name == "call" and called is compute:
            out.append(("compute", op.placement.tile_set))
        elif op.name == "call" and isinstance(called, popxl.Graph):
            _walk(called, compute, out)
        elif op.name == "repeat":
            for _ in range(op.attrs["count"]):
                _walk(op.attrs["graph"], compute, out)
        elif op.name in _KIND:
            out.append((_KIND[op.name], op.placement.tile_set))


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
