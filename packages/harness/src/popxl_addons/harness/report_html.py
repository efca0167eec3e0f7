"""The HTML report: one self-contained page drawn from the report document alone.

The summary comes first, then failures and errors with their messages, then per
case a chart and a sortable, filterable table of its variants (collapsed), then
the schedule picture. Style, script, charts and picture are inline: the page
needs no network and opens from disk.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping, Sequence
from html import escape
from importlib.resources import files
from pathlib import Path
from typing import Any

from popxl_addons.harness.charts import BYTE_SCALES, SECOND_SCALES, bar_chart
from popxl_addons.harness.units import (
    MISSING,
    format_bytes,
    format_diff,
    format_range,
    format_ratio,
    format_seconds,
)

Record = Mapping[str, Any]
# Problem groups shown expanded; the rest show their message on one line until opened.
OPEN_PROBLEMS = 5
# HTML, not escaped again.
LEGEND = (
    "Worst |diff| is the largest absolute difference between a serialised result and the normal one, over every "
    "output and gradient compared. Ratios are serialised &divide; normal: the device memory ratio of the bytes each "
    "program holds on a device (below 1&times;: serialising saves memory), the time ratio of their run times (below "
    "1&times;: serialising is faster). Ranges and medians are over the variants measured."
)


def _asset(name: str) -> str:
    return files("popxl_addons.harness").joinpath(name).read_text(encoding="utf-8")


def _anchor(case: str) -> str:
    return "case-" + re.sub(r"[^A-Za-z0-9_-]", "-", case)


def _badge(verdict: str) -> str:
    return f'<span class="badge {verdict.lower()}">{escape(verdict)}</span>'


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _status(totals: Record) -> str:
    ran = totals["variants"] - totals["skipped"]
    bad = totals["failed"] + totals["errors"]
    skipped = f" ({totals['skipped']} skipped)" if totals["skipped"] else ""
    if ran == 0:
        return f'<p class="status muted">No variant ran{skipped}.</p>'
    if bad == 0:
        return f'<p class="status ok">✓ All {_plural(ran, "variant")} that ran match{skipped}.</p>'
    parts = [f"{totals['failed']} failed"] if totals["failed"] else []
    parts += [_plural(totals["errors"], "error")] if totals["errors"] else []
    text = f"{bad} of {_plural(ran, 'variant')} did not pass: {', '.join(parts)}{skipped}."
    return f'<p class="status bad">✗ {text}</p>'


def _worst_cell(row: Record) -> str:
    title = ""
    if row["max_abs_diff_variant"] is not None:
        title = f' title="{escape(str(row["max_abs_diff_tensor"]))} of {escape(row["max_abs_diff_variant"])}"'
    return f'<td class="num"{title}>{format_diff(row["max_abs_diff"])}</td>'


def _range_cell(span: Mapping[str, float] | None) -> str:
    if span is None:
        return f'<td class="num">{MISSING}</td>'
    # The median too: one slow run on a busy machine stretches the range but hardly moves it.
    median = f'<span class="muted">median {format_ratio(span["median"])}</span>'
    return f'<td class="num">{escape(format_range(span["min"], span["max"], "ratio"))}, {median}</td>'


def _summary_row(row: Record, name: str) -> str:
    cells = [name, f'<td class="num">{row["variants"]}</td>']
    for field in ("passed", "failed", "errors", "skipped"):
        flag = f' class="num {field}"' if row[field] and field in ("failed", "errors") else ' class="num"'
        cells.append(f"<td{flag}>{row[field]}</td>")
    cells.append(_worst_cell(row))
    cells.append(_range_cell(row["device_ratio"]))
    cells.append(_range_cell(row["time_ratio"]))
    return f"<tr>{''.join(cells)}</tr>"


def _summary(document: Record) -> str:
    headers = ["variants", "passed", "failed", "errors", "skipped", "worst |diff|", "device memory ratio", "time ratio"]
    head = "<th>case</th>" + "".join(f'<th class="num">{h}</th>' for h in headers)
    rows = [
        _summary_row(c, f'<th scope="row"><a href="#{_anchor(c["case"])}">{escape(c["case"])}</a></th>')
        for c in document["cases"]
    ]
    foot = _summary_row(document["totals"], f'<th scope="row">all {document["totals"]["cases"]} cases</th>')
    return (
        '<section id="summary"><h2>Summary</h2><div class="scroll"><table class="summary">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody><tfoot>{foot}</tfoot></table></div>"
        f'<p class="legend">{LEGEND}</p></section>'
    )


def _tensor_table(record: Record) -> str:
    rows = "".join(
        f'<tr class="{"" if t["ok"] else "fail"}"><td><code>{escape(t["name"])}</code></td>'
        f'<td class="num">{format_diff(t["max_abs_diff"])}</td><td class="num">{format_diff(t["max_rel_diff"])}</td>'
        f"<td><code>{escape(str(tuple(t['where'])))}</code></td><td>{'ok' if t['ok'] else 'MISMATCH'}</td></tr>"
        for t in record["tensors"]
    )
    return (
        '<div class="scroll"><table class="tensors"><thead><tr><th>tensor</th><th class="num">max |diff|</th>'
        f'<th class="num">max rel diff</th><th>where</th><th></th></tr></thead><tbody>{rows}</tbody></table></div>'
    )


def _problems(records: Sequence[Record]) -> str:
    # Variants of one case that end with the same message (a module that cannot be built) are told once.
    groups: dict[tuple[str, str, str], list[Record]] = {}
    for verdict in ("FAIL", "ERROR"):
        for r in records:
            if r["verdict"] == verdict:
                groups.setdefault((verdict, r["case"], r["summary"]), []).append(r)
    count = sum(len(g) for g in groups.values())
    title = f'<h2>Failures and errors <span class="count">{count}</span></h2>'
    if not groups:
        return f'<section id="problems">{title}<p class="ok">None: every variant that ran matched.</p></section>'
    items = []
    for i, ((verdict, case, message), members) in enumerate(groups.items()):
        first = members[0]
        more = f' <span class="muted">and {len(members) - 1} more of {escape(case)}</span>' if len(members) > 1 else ""
        body = []
        if len(members) > 1:
            ids = "".join(f"<li><code>{escape(r['id'])}</code></li>" for r in members)
            body.append(f'<p>{len(members)} variants end this way:</p><ul class="ids">{ids}</ul>')
        if first["tensors"]:
            body.append(_tensor_table(first))
        if first["error"]:
            body.append(f"<pre>{escape(first['error'])}</pre>")
        items.append(
            f'<details class="problem {verdict.lower()}"{" open" if i < OPEN_PROBLEMS else ""}>'
            f"<summary>{_badge(verdict)} <code>{escape(first['id'])}</code>{more}"
            f'<span class="message">{escape(message)}</span></summary>{"".join(body)}</details>'
        )
    return f'<section id="problems">{title}{"".join(items)}</section>'


# A variant table's columns: header, its group in the header's first row, the record's field, and a formatter
# (None: the text as it is).
Column = tuple[str, str, str, Callable[[Any], str] | None]
SETTINGS: tuple[Column, ...] = (
    ("io_mode", "setting", "io_mode", None),
    ("steps", "setting", "steps", None),
    ("rows", "setting", "rows", None),
    ("store", "setting", "store", None),
    ("load", "setting", "load", None),
    ("layout", "setting", "layout", None),
    ("buffers in", "setting", "remote_memory", None),
)
FIGURES: tuple[Column, ...] = (
    ("max |diff|", "result", "max_abs_diff", format_diff),
    ("normal", "device memory", "device_bytes_normal", format_bytes),
    ("serialised", "device memory", "device_bytes_serialised", format_bytes),
    ("ratio", "device memory", "device_ratio", format_ratio),
    ("normal", "host memory", "host_bytes_normal", format_bytes),
    ("serialised", "host memory", "host_bytes_serialised", format_bytes),
    ("normal", "time per run", "time_s_normal", format_seconds),
    ("serialised", "time per run", "time_s_serialised", format_seconds),
    ("ratio", "time per run", "time_ratio", format_ratio),
)
# Settings every case varies are always shown; the others only where they vary.
ALWAYS = ("io_mode", "steps", "rows", "remote_memory")
NUMBERS = ("steps", "rows")


def _columns(records: Sequence[Record]) -> list[Column]:
    settings = [c for c in SETTINGS if c[2] in ALWAYS or len({r[c[2]] for r in records}) > 1]
    return [("verdict", "", "verdict", None), *settings, *FIGURES]


def _head(columns: Sequence[Column]) -> str:
    groups: list[list[Any]] = []
    for _, group, _, _ in columns:
        if groups and groups[-1][0] == group:
            groups[-1][1] += 1
        else:
            groups.append([group, 1])
    top = "".join(f'<th colspan="{n}" class="group">{escape(g)}</th>' for g, n in groups)
    sortable = "".join(
        f'<th data-col="{i}" class="{"num" if fmt or field in NUMBERS else ""}">'
        f'<button type="button">{escape(h)}</button></th>'
        for i, (h, _, field, fmt) in enumerate(columns)
    )
    note = f'<th data-col="{len(columns)}"><button type="button">note</button></th>'
    return f'<thead><tr>{top}<th class="group"></th></tr><tr>{sortable}{note}</tr></thead>'


def _row(record: Record, columns: Sequence[Column]) -> str:
    cells = []
    for _, _, field, fmt in columns:
        value = record[field]
        # Figures and counts sort by their number (data-v, empty when missing), the rest by their text.
        if field == "verdict":
            cells.append(f"<td>{_badge(value)}</td>")
        elif fmt is not None:
            raw = "" if value is None else repr(float(value))
            cells.append(f'<td class="num" data-v="{raw}">{escape(fmt(value))}</td>')
        elif field in NUMBERS:
            cells.append(f'<td class="num" data-v="{value}">{value}</td>')
        else:
            cells.append(f"<td>{escape(str(value))}</td>")
    note = "" if record["verdict"] == "PASS" else record["summary"]
    cells.append(f'<td class="note">{escape(note)}</td>')
    text = " ".join([record["id"], record["verdict"], record["summary"]]).lower()
    return (
        f'<tr class="{record["verdict"].lower()}" title="{escape(record["id"])}" data-text="{escape(text)}">'
        f"{''.join(cells)}</tr>"
    )


def _case(summary: Record, records: Sequence[Record]) -> str:
    case = summary["case"]
    anchor = _anchor(case)
    counts = ", ".join(
        f'<span class="{v.lower()}-text">{summary[field]} {label}</span>'
        for v, field, label in (
            ("PASS", "passed", "passed"),
            ("FAIL", "failed", "failed"),
            ("ERROR", "errors", "errors" if summary["errors"] != 1 else "error"),
            ("SKIP", "skipped", "skipped"),
        )
        if summary[field]
    )
    groups = summary["groups"]
    charts = bar_chart("Device memory", groups, "device_bytes", BYTE_SCALES, format_bytes)
    charts += bar_chart("Time per run", groups, "time_s", SECOND_SCALES, format_seconds)
    columns = _columns(records)
    body = "".join(_row(r, columns) for r in records)
    table_id = f"t-{anchor}"
    total = len(records)
    return (
        f'<section class="case" id="{anchor}"><h3>{escape(case)} <small>{counts}</small></h3>'
        f'<div class="charts">{charts}</div>'
        f'<details class="variants"><summary>Variants of {escape(case)}: {total} (sortable, filterable)</summary>'
        f'<div class="tools"><input type="search" data-filter="{table_id}" aria-label="Filter the variants of '
        f'{escape(case)}" placeholder="filter, e.g. io_overlapped steps4 fail">'
        f'<span class="shown" id="{table_id}-shown">{total} of {total} shown</span></div>'
        f'<div class="scroll"><table class="variants" id="{table_id}">{_head(columns)}<tbody>{body}</tbody>'
        "</table></div></details></section>"
    )


def _schedule(plot: Record | None) -> str:
    title = "<h2>Serialised schedules</h2>"
    if plot is None or not Path(plot["path"]).is_file():
        return (
            f'<section id="schedules">{title}<p class="muted">Not drawn: run the harness with '
            "<code>--plot PATH</code> to include each case's serialised schedule.</p></section>"
        )
    picture = base64.b64encode(Path(plot["path"]).read_bytes()).decode("ascii")
    drawn = "".join(
        f"<li><code>{escape(p['variant'])}</code></li>" for p in plot["panels"] if p.get("variant") is not None
    )
    return (
        f'<section id="schedules">{title}<p>The order in which each case\'s serialised graph loads, computes and '
        "stores, per io_mode, at its largest step count (also written to "
        f"<code>{escape(str(plot['path']))}</code>).</p>"
        f'<figure><img src="data:image/png;base64,{picture}" alt="Serialised schedules, a panel per case and '
        f'io_mode"></figure><details><summary>Variants drawn</summary><ul class="ids">{drawn}</ul></details>'
        "</section>"
    )


def render(document: Record) -> str:
    """The report page for a report document, as one HTML string."""
    records: Sequence[Record] = document["variants"]
    by_case: dict[str, list[Record]] = {}
    for r in records:
        by_case.setdefault(r["case"], []).append(r)
    totals = document["totals"]
    problems = totals["failed"] + totals["errors"]
    cases = "".join(_case(summary, by_case[summary["case"]]) for summary in document["cases"])
    links = " · ".join(f'<a href="#{_anchor(c["case"])}">{escape(c["case"])}</a>' for c in document["cases"])
    nav = (
        f'<nav><a href="#summary">Summary</a> · <a href="#problems">Failures and errors ({problems})</a> · '
        f'Cases: {links} · <a href="#schedules">Schedules</a></nav>'
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,"><title>popxl-addons harness: serialised vs normal</title>'
        f"<style>{_asset('report.css')}</style></head><body><main>"
        "<header><h1>Batch serialisation: serialised vs normal</h1>"
        f'{_status(totals)}<p class="muted">{_plural(totals["cases"], "case")}, '
        f"{_plural(totals['variants'], 'variant')}; each variant runs a module micro-batch by micro-batch "
        "(normal) and batch-serialised on the same data and compares every result.</p>"
        f"{nav}</header>"
        f"{_summary(document)}{_problems(records)}"
        f'<section id="cases"><h2>Cases</h2>{cases}</section>{_schedule(document["schedule_plot"])}'
        f'<footer class="muted">Every figure here is also in the JSON report (<code>--json</code>, schema '
        f"<code>{escape(document['schema'])}</code>), with units in its field names.</footer>"
        f"</main><script>{_asset('report.js')}</script></body></html>\n"
    )


def write_html(document: Record, path: str | Path) -> None:
    """Write the report page for a report document."""
    Path(path).write_text(render(document), encoding="utf-8")
