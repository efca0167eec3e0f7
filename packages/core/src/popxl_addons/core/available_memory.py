"""The IPU's available memory proportion of matmuls, convolutions, gathers and scatters, set per IPU.

On an IPU it bounds the tile memory such an op may use for temporaries. XLA plans its own memory, so here
the proportion is only recorded: `available_memory_proportion(op)` reads it back, and it changes nothing
that runs. An op is given the proportion of the IPU it was placed on (`popxl.ipu`), or of IPU 0 when the
list has no entry for that IPU; a later setting replaces an earlier one.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

import popxl
from popxl.extension import Op

__all__ = [
    "available_memory_proportion",
    "set_available_memory_proportion_by_ipu",
    "set_graph_available_memory_proportion_by_ipu",
]

# The op kinds popart lets the proportion be set on (popart's MatMul, Gather, ScatterReduce and conv ops).
MEMORY_PROPORTION_KINDS = frozenset(
    {
        "matmul",
        "matmul_pow2scaled",
        "gather",
        "groupedgather",
        "scatter",
        "scatter_reduce",
        "conv",
        "conv_transpose",
        "conv_pow2scaled",
        "conv_transpose_pow2scaled",
    }
)

_PROPORTIONS: weakref.WeakKeyDictionary[Op, float] = weakref.WeakKeyDictionary()


def available_memory_proportion(op: Op) -> float | None:
    """The proportion last set on `op` by these transforms, or None."""
    return _PROPORTIONS.get(op)


def _set_on_op(op: Op, by_ipu: dict[int, float]) -> None:
    if op.name in MEMORY_PROPORTION_KINDS:
        _PROPORTIONS[op] = float(by_ipu.get(op.placement.ipu, by_ipu[0]))


def set_available_memory_proportion_by_ipu(ir: popxl.Ir, proportions: Iterable[float]) -> None:
    """Set the available memory proportion on every op of `ir` that has one: `proportions[n]` for the ops on
    IPU n. Recorded only (see the module's docstring)."""
    by_ipu = dict(enumerate(proportions))
    for graph in ir.graphs:
        for op in graph.ops:
            _set_on_op(op, by_ipu)


def set_graph_available_memory_proportion_by_ipu(graph: popxl.Graph, proportions: Iterable[float]) -> None:
    """As `set_available_memory_proportion_by_ipu`, for the ops of `graph` and of the graphs its ops run,
    directly or not."""
    by_ipu = dict(enumerate(proportions))
    seen: set[int] = set()
    todo = [graph]
    while todo:
        g = todo.pop()
        if id(g) in seen:
            continue
        seen.add(id(g))
        for op in g.ops:
            todo.extend(sub.graph for sub in op.subgraphs)
            _set_on_op(op, by_ipu)
