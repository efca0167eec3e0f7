"""The harness report: the terminal tables (results that fit the terminal, the figures they had no room for,
a summary per case) and the JSON and HTML files, from one document."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from popxl_addons.harness import document, report_html
from popxl_addons.harness.equivalence import VERDICTS, Outcome
from popxl_addons.harness.units import format_bytes, format_seconds

STYLE = {"PASS": "green", "FAIL": "bold red", "ERROR": "bold magenta", "SKIP": "dim"}
# The figure columns of the results table, dropped in this order when the terminal is too narrow.
OPTIONAL_COLUMNS = ("time normal/serial", "device normal/serial")


def cells(o: Outcome) -> dict[str, str]:
    """One variant's cells of the results table, by column (markup escaped, verdicts styled)."""
    device = {p: o.memory.get(p, {}).get("device_bytes") for p in ("normal", "serialised")}
    return {
        "variant": escape(o.variant.id),
        "verdict": f"[{STYLE[o.verdict]}]{o.verdict}[/]",
        "detail": escape(o.summary),
        "device normal/serial": f"{format_bytes(device['normal'])}/{format_bytes(device['serialised'])}",
        "time normal/serial": f"{format_seconds(o.seconds.get('normal'))}/"
        f"{format_seconds(o.seconds.get('serialised'))}",
    }


def table(outcomes: Sequence[Outcome], width: int) -> Table:
    """The variants that ran, one row each, in at most `width` columns: identity and verdict first.

    Skipped variants are left to `skipped_lines`; the optional figure columns are
    dropped, timing first, when the terminal is too narrow for them.
    """
    ran = [o for o in outcomes if o.verdict != "SKIP"]
    rows = [cells(o) for o in ran]
    columns = ["variant", "verdict", "detail", *reversed(OPTIONAL_COLUMNS)]
    longest = {c: max([len(c)] + [len(row[c]) for row in rows]) for c in columns}
    longest["verdict"] = 7
    for dropped in (None, *OPTIONAL_COLUMNS):
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
    for row in rows:
        t.add_row(*(row[c] for c in columns))
    return t


def figures_table(outcomes: Sequence[Outcome], shown: Table, width: int) -> Table | None:
    """The measured figures that `shown` (the results table) had no room for, a row per variant, or None."""
    # A narrow terminal or a log (80 columns) drops the figure columns from the results table: they follow.
    headers = {str(c.header) for c in shown.columns}
    dropped = [c for c in reversed(OPTIONAL_COLUMNS) if c not in headers]
    measured = [o for o in outcomes if o.verdict != "SKIP" and any(math.isfinite(s) for s in o.seconds.values())]
    if not dropped or not measured:
        return None
    t = Table(title="Figures per variant", title_justify="left", width=width)
    t.add_column("variant", overflow="fold")
    for c in dropped:
        t.add_column(c, justify="right", no_wrap=True)
    for o in measured:
        row = cells(o)
        t.add_row(row["variant"], *(row[c] for c in dropped))
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
        t.add_row(case, *(f"[{STYLE[v]}]{c[v]}[/]" if c[v] and v != "PASS" else str(c[v]) for v in VERDICTS))
    return t


def repeated_warnings(outcomes: Sequence[Outcome]) -> list[str]:
    """Each distinct warning raised while checking, once, with how many times it was raised."""
    counts = Counter(w for o in outcomes for w in o.warnings)
    return [f"warning ({n}x): {w}" if n > 1 else f"warning: {w}" for w, n in counts.most_common()]


def write_json(outcomes: Sequence[Outcome], path: str | Path, schedule_plot: Mapping[str, Any] | None = None) -> None:
    """Write the report document as JSON: every figure of the HTML report, errors with their full tracebacks."""
    document.write_json(document.build(outcomes, schedule_plot), path)


def write_html(outcomes: Sequence[Outcome], path: str | Path, schedule_plot: Mapping[str, Any] | None = None) -> None:
    """Write the report as one self-contained HTML page; `schedule_plot` names the --plot picture to embed."""
    report_html.write_html(document.build(outcomes, schedule_plot), path)
