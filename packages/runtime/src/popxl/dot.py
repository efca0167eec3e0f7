"""Graphviz DOT pictures of an Ir at named checkpoints, as popxl's `Ir.dot_checkpoint` writes them.

A checkpoint is written when its name (case-insensitive) is among the active
checks: the union of the `POPART_DOT_CHECKS` environment variable (names
separated by ':') and the session option `dotChecks`; 'ALL' activates every
checkpoint. A Session writes the 'FINAL' checkpoint when it is created. Files
go to the session option `logDir` (the working directory by default).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from popxl.op import reachable_graphs

if TYPE_CHECKING:
    from popxl.graph import Graph
    from popxl.ir import Ir

CHECKS_VARIABLE = "POPART_DOT_CHECKS"


def active_checks(ir: Ir) -> set[str]:
    """The active checkpoint names, upper case."""
    opts = ir.session_options
    names = {*os.environ.get(CHECKS_VARIABLE, "").split(":"), *opts.dotChecks}
    return {n.upper() for n in names if n}


def is_active(ir: Ir, check: str) -> bool:
    """Whether checkpoint `check` is written."""
    checks = active_checks(ir)
    return "ALL" in checks or check.upper() in checks


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _graph_lines(graph: Graph, indent: str) -> list[str]:
    lines = []
    for t in graph.tensors:
        lines.append(f"{indent}{_quote(t.id)} [shape=ellipse, label={_quote(f'{t.name} {t.dtype.name} {t.shape}')}];")
    for k, op in enumerate(graph.ops):
        node = _quote(f"{graph.id}#op{k}")
        lines.append(f"{indent}{node} [shape=box, label={_quote(op.name)}];")
        lines += [f"{indent}{_quote(t.id)} -> {node};" for t in op.inputs]
        lines += [f"{indent}{node} -> {_quote(t.id)};" for t in op.outputs]
    return lines


def to_dot(ir: Ir) -> str:
    """The main graph and every graph it runs, each as a cluster of its tensors and ops."""
    lines = ["digraph ir {"]
    for k, graph in enumerate(reachable_graphs(ir.main_graph)):
        lines.append(f"  subgraph cluster_{k} {{")
        lines.append(f"    label={_quote(graph.id or 'main_graph')};")
        lines += _graph_lines(graph, "    ")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_checkpoint(ir: Ir, check: str, ordinal: int) -> Path | None:
    """Write checkpoint `check`, the `ordinal`-th of `ir`, if it is active; returns the file written."""
    if not is_active(ir, check):
        return None
    folder = Path(ir.session_options.logDir or ".")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{ordinal:03d}_{check}.dot"
    path.write_text(to_dot(ir))
    return path
