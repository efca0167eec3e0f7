"""An estimate of a program's floating-point operations, per op kind, from its graphs' ops and shapes.

Counted, as in popxl-addons: matrix products, group (and so layer) normalisations, and the out-of-place
elementwise add, subtract, multiply and divide; an op that runs a subgraph (a call, a repeat) counts that
graph's FLOPs as many times as it runs it. Other ops (in-place variants, gradients' `vjp` ops, conditionals'
branches) count nothing. Each count is its op kind's own declaration (`PopartFacts.flops`), from shapes alone, so
nothing is compiled or run.

Breakdowns are keyed by popart's op types (`MatMul`, `Add`, `Sub`, `Mul`, `Div`, `GroupNormalization`: each op
kind's `PopartFacts.op_type`) as in popxl-addons; within a type, by the op's id (`Op.id`, numbered from 100 over
the Ir as popart numbers its ops). An op running a subgraph adds `<Call|Loop>_<id>(<graph name>)` under each type,
holding that graph's breakdown for the type.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Literal

import popxl
from popxl.utils import table_to_string

__all__ = ["total_FLOPs", "evaluate_ir_FLOPs", "evaluate_FLOPs", "print_FLOPs", "format_flops_scientific"]

Breakdown = dict[str, Any]


def _scaled(v: Any, factor: int) -> Any:
    if isinstance(v, Mapping):
        return {k: _scaled(x, factor) for k, x in v.items()}
    return v * factor


def _total(v: Any) -> int:
    if isinstance(v, Mapping):
        return sum(_total(x) for x in v.values())
    return int(v)


def _graph_flops(graph: popxl.Graph, seen: dict[int, Breakdown]) -> Breakdown:
    if id(graph) in seen:
        return seen[id(graph)]
    total = 0
    breakdown: Breakdown = {}
    for op in graph.ops:
        subgraphs = op.subgraphs
        op_type = op.opdef.popart.op_type or op.name
        if len(subgraphs) == 1:
            sub = subgraphs[0]
            called = _scaled(_graph_flops(sub.graph, seen), sub.trips)
            total += called["TOT"]
            key = f"{op_type}_{op.id}({re.sub(r'_subgraph[(][0-9]+[)]', '', sub.graph.id)})"
            for k, v in called.items():
                breakdown.setdefault(k, {})[key] = v
        elif not subgraphs and (flops := op.flops) is not None:
            total += flops
            breakdown.setdefault(op_type, {})[op.id] = flops
    breakdown["TOT"] = total
    seen[id(graph)] = breakdown
    return breakdown


def evaluate_FLOPs(graph: popxl.Graph) -> Breakdown:
    """The FLOPs of one execution of `graph` on one replica, by op type (see the module's docstring);
    `"TOT"` holds the total."""
    return _graph_flops(graph, {})


def evaluate_ir_FLOPs(ir: popxl.Ir) -> Breakdown:
    """`evaluate_FLOPs` of the main graph, for all replicas (times the replication factor)."""
    result: Breakdown = _scaled(evaluate_FLOPs(ir.main_graph), ir.replication_factor)
    return result


def total_FLOPs(ir: popxl.Ir) -> int:
    """The program's FLOPs estimate over all replicas."""
    return int(evaluate_ir_FLOPs(ir)["TOT"])


def _flat(tree: Mapping[Any, Any], prefix: str = "") -> dict[str, int]:
    out: dict[str, int] = {}
    for k, v in tree.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(_flat(v, key))
        else:
            out[key] = int(v)
    return out


def print_FLOPs(
    flops_breakdown: Mapping[str, Any],
    mode: Literal["type", "flat"] = "type",
    numerical_format: Literal["K", "M", "G", "T", "nearest3"] = "nearest3",
) -> None:
    """Print a breakdown as a table, largest first: per op type with its share of the total (`mode="type"`),
    or each op on its own line under its dotted key (`mode="flat"`), the total last."""
    if mode == "type":
        rows: list[list[str]] = [["Op Type", "FLOPs", "%"]]
        grouped = {k: _total(v) for k, v in flops_breakdown.items()}
        whole = grouped["TOT"]
        for k, v in sorted(grouped.items(), key=lambda kv: kv[1], reverse=True):
            share = 100 * v / whole if whole else 0.0
            rows.append([k, format_flops_scientific(v, numerical_format), f"{share:.1f}"])
    elif mode == "flat":
        rows = [["Op Type", "FLOPs", "Op Name"]]
        flat = _flat(flops_breakdown)
        for k, v in sorted(flat.items(), key=lambda kv: kv[1], reverse=True):
            rows.append([k.split(".")[0], format_flops_scientific(v, numerical_format), k])
        rows.append(["TOT", format_flops_scientific(flat["TOT"], numerical_format), ""])
    else:
        raise ValueError("Unknown mode specified. Please use `type` or `flat`.")
    print(table_to_string(rows))


_EXPONENTS = {"K": 3, "M": 6, "G": 9, "T": 12}


def format_flops_scientific(val: float, format: Literal["K", "M", "G", "T", "nearest3"] = "nearest3") -> str:
    """`val` as `<mantissa to 3 decimals>E<sign><2-digit exponent>`, the exponent a multiple of 3: the given
    unit's (K, M, G, T), or with "nearest3" the multiple of 3 nearest the value's own power of ten
    (9072 gives 9.072E+03, 950 gives 0.950E+03)."""
    if format == "nearest3":
        power = math.floor(math.log10(abs(val))) if val > 0 else 0
        exponent = 3 * (power // 3 + (1 if power % 3 == 2 else 0))
    elif format in _EXPONENTS:
        exponent = _EXPONENTS[format]
    else:
        raise ValueError("unknown format specified")
    sign = "-" if exponent < 0 else "+"
    return f"{val * 10.0 ** (-exponent):.3f}E{sign}{abs(exponent):02d}"
