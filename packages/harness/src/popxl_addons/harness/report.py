"""The harness report: terminal tables that fit the terminal; the JSON and HTML files, from one document."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from popxl_addons.harness import document, report_html
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


def write_json(outcomes: Sequence[Outcome], path: str | Path, schedule_plot: Mapping[str, Any] | None = None) -> None:
    """Write the report document as JSON: every figure of the HTML report, errors with their full tracebacks."""
    document.write_json(document.build(outcomes, schedule_plot), path)


def write_html(outcomes: Sequence[Outcome], path: str | Path, schedule_plot: Mapping[str, Any] | None = None) -> None:
    """Write the report as one self-contained HTML page; `schedule_plot` names the --plot picture to embed."""
    report_html.write_html(document.build(outcomes, schedule_plot), path)
