"""The IPU's available memory proportion of matmuls, convolutions, gathers and scatters, set per IPU.

On an IPU it bounds the tile memory such an op may use for temporaries. XLA plans its own memory, so here
the proportion is only recorded with the op's other IPU-only settings (`popxl.ipu_only`), where the op's
own `available_memory_proportion(s)` argument is kept too: `available_memory_proportion(op)` reads it back,
and it changes nothing that runs. The ops set are those whose kinds declare the setting
(`PopartFacts.ipu_settings`). An op is given the proportion of the IPU it was placed on (`popxl.ipu`), or of IPU 0
when the list has no entry for that IPU; a later setting replaces an earlier one.
"""

from __future__ import annotations

from collections.abc import Iterable

import popxl
from popxl import ipu_only
from popxl.extension import Op
from popxl.ipu_only import available_memory_proportion
from popxl.op import reachable_graphs

__all__ = [
    "available_memory_proportion",
    "set_available_memory_proportion_by_ipu",
    "set_graph_available_memory_proportion_by_ipu",
]


def _set_on_op(op: Op, by_ipu: dict[int, float]) -> None:
    settings = op.opdef.popart.ipu_settings
    if not settings & {"available_memory_proportion", "available_memory_proportions"}:
        return
    proportion = float(by_ipu.get(op.placement.ipu, by_ipu[0]))
    if "available_memory_proportion" in settings:
        ipu_only.record(op, available_memory_proportion=proportion)
    else:
        # A convolution op holds one convolution here: one proportion, as popxl-addons sets it.
        ipu_only.record(op, available_memory_proportions=[proportion])


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
    for g in reachable_graphs(graph):
        for op in g.ops:
            _set_on_op(op, by_ipu)
