"""The harness report: terminal tables that fit the terminal, JSON and HTML."""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from popxl_addons.harness.equivalence import VERDICTS, Outcome

MiB = 2**20
_STYLE = {"PASS": "green", "FAIL": "bold red", "ERROR": "bold magenta", "SKIP": "dim"}
# Optional columns, dropped in this order when the terminal is too narrow.
_OPTIONAL = ("ms normal/serial", "device MiB normal/serial")


def _figure(o: Outcome, program: str, figure: str) -> int:
    return o.memory.get(program, {}).get(figure, -1)


def _mib(n: int) -> str:
    return "-" if n < 0 else f"{n / MiB:.2f}"


def _ms(s: float) -> str:
    return "-" if s != s else f"{s * 1000:.1f}"


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
                "verdict": o.verdict,
                "summary": o.summary,
                "max_abs_error": o.max_abs,
                "passed": o.passed,
                **{
                    f"{figure.removesuffix('_bytes')}_kib_{program}": _figure(o, program, figure) / 1024
                    for program in ("normal", "serialised")
                    for figure in ("device_bytes", "host_bytes", "temp")
                },
                "ms_normal": o.seconds.get("normal", float("nan")) * 1000,
                "ms_serialised": o.seconds.get("serialised", float("nan")) * 1000,
                "tensors": [t.__dict__ for t in o.tensors],
                "error": o.error,
                "warnings": o.warnings,
            }
        )
    return out


def _cells(o: Outcome) -> dict[str, str]:
    v = o.variant
    return {
        "variant": escape(v.id),
        "verdict": f"[{_STYLE[o.verdict]}]{o.verdict}[/]",
        "detail": escape(o.summary),
        "device MiB normal/serial": f"{_mib(_figure(o, 'normal', 'device_bytes'))}/"
        f"{_mib(_figure(o, 'serialised', 'device_bytes'))}",
        "ms normal/serial": f"{_ms(o.seconds.get('normal', float('nan')))}/"
        f"{_ms(o.seconds.get('serialised', float('nan')))}",
    }


def table(outcomes: Sequence[Outcome], width: int) -> Table:
    """The variants that ran, one row each, in at most `width` columns: identity and verdict first.

    Skipped variants are left to `skipped_lines`; the optional figure columns are
    dropped, timing first, when the terminal is too narrow for them.
    """
    ran = [o for o in outcomes if o.verdict != "SKIP"]
    cells = [_cells(o) for o in ran]
    columns = ["variant", "verdict", "detail", *reversed(_OPTIONAL)]
    longest = {c: max([len(c)] + [len(row[c]) for row in cells]) for c in columns}
    longest["verdict"] = 7
    for dropped in (None, *_OPTIONAL):
        if dropped is not None:
            columns.remove(dropped)
        # Room for the variant and verdict whole, 24 columns of detail, and the borders.
        needed = sum(longest[c] for c in columns if c != "detail") + 24 + 3 * len(columns) + 1
        if needed <= width:
            break
    t = Table(title="Batch serialisation: serialised vs normal", title_justify="left", width=min(width, 200))
    t.add_column("variant", overflow="fold", ratio=3)
    t.add_column("verdict", no_wrap=True, min_width=5)
    t.add_column("detail", overflow="fold", ratio=2)
    for c in columns[3:]:
        t.add_column(c, justify="right", no_wrap=True)
    for row in cells:
        t.add_row(*(row[c] for c in columns))
    return t


def skipped_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """One line per distinct reason for skipping variants, with how many it skipped."""
    counts = Counter(o.skipped for o in outcomes if o.skipped is not None)
    return [f"skipped {n} variant(s): {reason}" for reason, n in counts.items()]


def case_summary(outcomes: Sequence[Outcome]) -> Table:
    """Verdict counts per case."""
    counts: dict[str, Counter[str]] = {}
    for o in outcomes:
        counts.setdefault(o.variant.case.name, Counter())[o.verdict] += 1
    t = Table(title="Summary per case", title_justify="left")
    t.add_column("case")
    for verdict in VERDICTS:
        t.add_column(verdict.lower(), justify="right")
    for case, c in counts.items():
        t.add_row(case, *(f"[{_STYLE[v]}]{c[v]}[/]" if c[v] and v != "PASS" else str(c[v]) for v in VERDICTS))
    return t


def repeated_warnings(outcomes: Sequence[Outcome]) -> list[str]:
    """Each distinct warning raised while checking, once, with how many times it was raised."""
    counts = Counter(w for o in outcomes for w in o.warnings)
    return [f"warning ({n}x): {w}" if n > 1 else f"warning: {w}" for w, n in counts.most_common()]


def write_json(outcomes: Sequence[Outcome], path: str | Path) -> None:
    """Write every outcome as JSON, errors with their full tracebacks."""
    Path(path).write_text(json.dumps({"cases": rows(outcomes)}, indent=2, default=str))


def write_html(outcomes: Sequence[Outcome], path: str | Path) -> None:
    """Write the outcomes as HTML: a section per case with its summary, failures and errors expanded."""
    records = rows(outcomes)
    keys = ["id", "verdict", "summary", "device_kib_normal", "device_kib_serialised"]
    keys += ["host_kib_normal", "host_kib_serialised", "ms_normal", "ms_serialised"]
    head = "".join(f"<th>{k}</th>" for k in keys)
    sections = []
    by_case: dict[str, list[tuple[dict[str, Any], Outcome]]] = {}
    for r, o in zip(records, outcomes):
        by_case.setdefault(o.variant.case.name, []).append((r, o))
    for case, members in by_case.items():
        counts = Counter(o.verdict for _, o in members)
        summary = ", ".join(f"{counts[v]} {v.lower()}" for v in VERDICTS if counts[v])
        body = []
        for r, o in members:
            cells = "".join(
                f"<td>{html.escape(f'{r[k]:.4g}' if isinstance(r[k], float) else str(r[k]))}</td>" for k in keys
            )
            body.append(f'<tr class="{o.verdict.lower()}">{cells}</tr>')
            if o.verdict in ("FAIL", "ERROR"):
                detail = f"<details open><pre>{html.escape(o.report())}</pre></details>"
                body.append(f'<tr class="{o.verdict.lower()}"><td colspan="{len(keys)}">{detail}</td></tr>')
        status = "ok" if all(o.verdict in ("PASS", "SKIP") for _, o in members) else "bad"
        sections.append(
            f'<h2 class="{status}">{html.escape(case)}: {summary}</h2><table><tr>{head}</tr>{"".join(body)}</table>'
        )
    passed = sum(o.passed for o in outcomes)
    ran = sum(o.verdict != "SKIP" for o in outcomes)
    Path(path).write_text(
        "<!doctype html><meta charset='utf-8'><title>popxl-addons harness</title>"
        "<style>body{font-family:sans-serif}td,th{padding:2px 8px;border-bottom:1px solid #ddd}"
        ".fail,.error{background:#fdd}.skip{color:#888}h2.bad{color:#a00}</style>"
        f"<h1>Batch serialisation: {passed}/{ran} passed</h1>"
        "<p>Memory is per device: device and host bytes held while the program runs (KiB).</p>"
        f"{''.join(sections)}"
    )
