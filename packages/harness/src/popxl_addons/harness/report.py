"""The harness report: a terminal table, JSON and HTML."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from popxl_addons.harness.equivalence import Outcome


def _kib(n: int) -> str:
    return "-" if n < 0 else f"{n / 1024:.1f}"


def _ms(s: float) -> str:
    return "-" if s != s else f"{s * 1000:.1f}"


def _figure(o: Outcome, program: str, figure: str) -> int:
    return o.memory.get(program, {}).get(figure, -1)


def rows(outcomes: Sequence[Outcome]) -> list[dict[str, Any]]:
    """One flat record per outcome."""
    out = []
    for o in outcomes:
        v = o.variant
        out.append(
            {
                "id": v.id,
                "case": v.case.name,
                "io_mode": v.io_mode,
                "steps": v.steps,
                "rows": v.rows,
                "store": v.store,
                "load": v.load,
                "grouping": v.layout.label,
                "remote_memory": v.remote_memory,
                "max_abs_error": o.max_abs,
                "passed": o.passed,
                **{
                    f"{figure.removesuffix('_bytes')}_kib_{program}": o.memory.get(program, {}).get(figure, -1) / 1024
                    for program in ("normal", "serialised")
                    for figure in ("device_bytes", "host_bytes", "temp")
                },
                "ms_normal": o.seconds.get("normal", float("nan")) * 1000,
                "ms_serialised": o.seconds.get("serialised", float("nan")) * 1000,
                "tensors": [t.__dict__ for t in o.tensors],
                "error": o.error,
            }
        )
    return out


def table(outcomes: Sequence[Outcome]) -> Table:
    """A rich table of the outcomes."""
    t = Table(title="Batch serialisation: serialised vs normal")
    for col in ("case", "io_mode", "steps", "rows", "store/load", "replicas", "remote", "max err", "ok"):
        t.add_column(col, no_wrap=True)
    for col in ("device KiB normal/serial", "ms normal/serial"):
        t.add_column(col, justify="right", no_wrap=True)
    for o in outcomes:
        v = o.variant
        t.add_row(
            v.case.name,
            v.io_mode,
            str(v.steps),
            str(v.rows),
            f"{v.store}/{v.load}",
            v.layout.label,
            v.remote_memory,
            f"{o.max_abs:.1e}",
            "[green]pass[/green]" if o.passed else "[red]FAIL[/red]",
            f"{_kib(_figure(o, 'normal', 'device_bytes'))}/{_kib(_figure(o, 'serialised', 'device_bytes'))}",
            f"{_ms(o.seconds.get('normal', float('nan')))}/{_ms(o.seconds.get('serialised', float('nan')))}",
        )
    return t


def write_json(outcomes: Sequence[Outcome], path: str | Path) -> None:
    """Write every outcome as JSON."""
    Path(path).write_text(json.dumps({"cases": rows(outcomes)}, indent=2, default=str))


def write_html(outcomes: Sequence[Outcome], path: str | Path) -> None:
    """Write every outcome as an HTML table, failures with their reports."""
    records = rows(outcomes)
    keys = ["id", "max_abs_error", "passed", "device_kib_normal", "device_kib_serialised"]
    keys += ["host_kib_normal", "host_kib_serialised", "ms_normal", "ms_serialised"]
    head = "".join(f"<th>{k}</th>" for k in keys)
    body = []
    for r, o in zip(records, outcomes):
        cls = "pass" if r["passed"] else "fail"
        cells = "".join(
            f"<td>{html.escape(f'{r[k]:.4g}' if isinstance(r[k], float) else str(r[k]))}</td>" for k in keys
        )
        body.append(f'<tr class="{cls}">{cells}</tr>')
        if not o.passed:
            body.append(f'<tr class="fail"><td colspan="{len(keys)}"><pre>{html.escape(o.report())}</pre></td></tr>')
    passed = sum(o.passed for o in outcomes)
    Path(path).write_text(
        "<!doctype html><meta charset='utf-8'><title>popxl-addons harness</title>"
        "<style>body{font-family:sans-serif}td,th{padding:2px 8px;border-bottom:1px solid #ddd}"
        ".fail{background:#fdd}</style>"
        f"<h1>Batch serialisation: {passed}/{len(outcomes)} passed</h1>"
        f"<table><tr>{head}</tr>{''.join(body)}</table>"
    )
