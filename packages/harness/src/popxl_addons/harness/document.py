"""The report as data: a record per variant and a summary per case, with units in the field names.

The JSON report is this document and the HTML report is drawn from it alone, so
every figure the HTML shows can be read from the JSON. Missing figures (not
measured, or not finite) are null, so the JSON is strict.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from popxl_addons.harness.equivalence import Outcome

SCHEMA = "popxl-addons-harness-report/2"
PROGRAMS = ("normal", "serialised")
# Memory figures kept per program: the runtime's name and the field's stem.
MEMORY_FIGURES = (("device_bytes", "device_bytes"), ("host_bytes", "host_bytes"), ("temp", "temp_bytes"))
# Per (io_mode, steps) group of a case, what its charts show.
GROUP_FIGURES = ("device_bytes_normal", "device_bytes_serialised", "time_s_normal", "time_s_serialised")


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _bytes(o: Outcome, program: str, figure: str) -> int | None:
    value = o.memory.get(program, {}).get(figure)
    return value if value is not None and value >= 0 else None


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def variant_record(o: Outcome) -> dict[str, Any]:
    """One variant: its settings, verdict, differences, memory in bytes and run time in seconds per program."""
    v = o.variant
    record: dict[str, Any] = {
        "id": v.id,
        "case": v.case.name,
        "io_mode": v.io_mode,
        "steps": v.steps,
        "rows": v.rows,
        "store": v.store,
        "load": v.load,
        "layout": v.layout.label,
        "remote_memory": v.remote_memory,
        "verdict": o.verdict,
        "passed": o.passed,
        "summary": o.summary,
        "max_abs_diff": _finite(o.max_abs) if o.tensors else None,
        "max_rel_diff": _finite(max(t.max_rel for t in o.tensors)) if o.tensors else None,
    }
    for program in PROGRAMS:
        for figure, stem in MEMORY_FIGURES:
            record[f"{stem}_{program}"] = _bytes(o, program, figure)
        record[f"time_s_{program}"] = _finite(o.seconds.get(program))
    record["device_ratio"] = _ratio(record["device_bytes_serialised"], record["device_bytes_normal"])
    record["time_ratio"] = _ratio(record["time_s_serialised"], record["time_s_normal"])
    record["tensors"] = [
        {
            "name": t.name,
            "max_abs_diff": _finite(t.max_abs),
            "max_rel_diff": _finite(t.max_rel),
            "where": list(t.where),
            "ok": t.ok,
        }
        for t in o.tensors
    ]
    record["error"] = o.error
    record["warnings"] = list(o.warnings)
    return record


def span(values: Iterable[float | None]) -> dict[str, float] | None:
    """The smallest, median and largest of the known values, or None when none is known."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    return {"min": min(known), "median": statistics.median(known), "max": max(known)}


def _counts(records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    verdicts = [r["verdict"] for r in records]
    return {
        "variants": len(records),
        "passed": verdicts.count("PASS"),
        "failed": verdicts.count("FAIL"),
        "errors": verdicts.count("ERROR"),
        "skipped": verdicts.count("SKIP"),
    }


def _worst(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    compared = [r for r in records if r["max_abs_diff"] is not None]
    if not compared:
        return {"max_abs_diff": None, "max_abs_diff_variant": None, "max_abs_diff_tensor": None}
    worst = max(compared, key=lambda r: r["max_abs_diff"])
    tensors = [t for t in worst["tensors"] if t["max_abs_diff"] is not None]
    tensor = max(tensors, key=lambda t: t["max_abs_diff"])["name"] if tensors else None
    return {"max_abs_diff": worst["max_abs_diff"], "max_abs_diff_variant": worst["id"], "max_abs_diff_tensor": tensor}


def _ranges(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {
        "device_ratio": span(r["device_ratio"] for r in records),
        "time_ratio": span(r["time_ratio"] for r in records),
    }


def case_summary(case: str, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Verdict counts, the worst difference, ranges of device and time ratios, and chart figures of one case.

    `groups` holds, per io_mode and step count in run order, the min, median and
    max of each program's device bytes and run time over the variants measured.
    """
    keys = list(dict.fromkeys((r["io_mode"], r["steps"]) for r in records))
    groups = []
    for io_mode, steps in keys:
        members = [r for r in records if (r["io_mode"], r["steps"]) == (io_mode, steps)]
        figures = {f: span(r[f] for r in members) for f in GROUP_FIGURES}
        measured = sum(any(r[f] is not None for f in GROUP_FIGURES) for r in members)
        groups.append({"io_mode": io_mode, "steps": steps, "measured": measured, **figures})
    return {"case": case, **_counts(records), **_worst(records), **_ranges(records), "groups": groups}


def build(outcomes: Sequence[Outcome], schedule_plot: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The whole report: totals, a summary per case, every variant in run order and the schedule plot drawn.

    `schedule_plot`, when the plot was written, is `{"path": ..., "panels": [...]}`,
    a panel per case and io_mode naming the variant drawn.
    """
    records = [variant_record(o) for o in outcomes]
    by_case: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_case.setdefault(r["case"], []).append(r)
    totals = {"cases": len(by_case), **_counts(records), **_worst(records), **_ranges(records)}
    return {
        "schema": SCHEMA,
        "totals": totals,
        "cases": [case_summary(case, members) for case, members in by_case.items()],
        "variants": records,
        "schedule_plot": dict(schedule_plot) if schedule_plot is not None else None,
    }


def write_json(document: Mapping[str, Any], path: str | Path) -> None:
    """Write the document as strict JSON (no NaN or infinity)."""
    Path(path).write_text(json.dumps(document, indent=2, allow_nan=False) + "\n")
