"""popxl's code loading: copying a graph's compiled code into executable memory before it runs.

An IPU can keep a graph's code in remote memory and load it onto the chip when it is needed. XLA keeps a
program's code where it runs, so here `remote_code_load` is checked as popxl checks it and recorded on the
graph it is called in (`code_loads`), and it changes nothing that runs.
"""

from __future__ import annotations

import weakref
from typing import Literal, NamedTuple

from popxl import context
from popxl.graph import Graph

CODE_LOCATION = Literal["executable", "compute_buffer", "io_buffer"]
_LOCATIONS = ("executable", "compute_buffer", "io_buffer")


class CodeLoad(NamedTuple):
    """One `remote_code_load`: the graph whose code is loaded, where to, and how many ops the calling graph
    had before it (the position it takes in that graph's order)."""

    graph: Graph
    destination: str
    position: int


_LOADS: weakref.WeakKeyDictionary[Graph, list[CodeLoad]] = weakref.WeakKeyDictionary()


def remote_code_load(graph: Graph, destination: CODE_LOCATION) -> None:
    """Load `graph`'s code from remote memory to `destination` ("executable" is the one popxl supports).

    Recorded on the current graph only (see the module's docstring). As in popxl, a graph cannot load its own
    code, a destination other than the three locations is a ValueError, and "compute_buffer" and
    "io_buffer" raise NotImplementedError.
    """
    parent = context.gcg()
    if parent is graph:
        raise ValueError(f"The remote_code_load op cannot load the code for the graph it resides in ({parent.id}).")
    if destination not in _LOCATIONS:
        raise ValueError(f"Not a valid location: {destination}. Must choose from: {', '.join(_LOCATIONS)}")
    if destination != "executable":
        raise NotImplementedError(
            f"destination == '{destination}' for remote_code_load op, graph {graph.id} not supported."
        )
    _LOADS.setdefault(parent, []).append(CodeLoad(graph, destination, len(parent.ops)))


def code_loads(graph: Graph) -> tuple[CodeLoad, ...]:
    """The `remote_code_load`s made in `graph`, in order."""
    return tuple(_LOADS.get(graph, ()))
