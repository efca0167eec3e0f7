"""The report without a browser: human units, the document's fields and summaries, and the page's parts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from popxl_addons.harness import Case, Outcome, TensorReport
from popxl_addons.harness.charts import BYTE_SCALES, SECOND_SCALES, ticks
from popxl_addons.harness.document import build, span
from popxl_addons.harness.report import write_html, write_json
from popxl_addons.harness.units import (
    MISSING,
    TIMES,
    format_bytes,
    format_diff,
    format_range,
    format_ratio,
    format_seconds,
)
from popxl_addons.layers import Scale


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (24, "24 B"),
        (1023, "1023 B"),
        (1024, "1.00 KiB"),
        (1536, "1.50 KiB"),
        (10 * 1024 + 300, "10.3 KiB"),
        (1023.9 * 1024, "1.00 MiB"),
        (123.4 * 2**20, "123 MiB"),
        (3 * 2**30, "3.00 GiB"),
        (None, MISSING),
        (-1, MISSING),
    ],
)
def test_bytes_read_in_binary_units_to_three_digits(n: float | None, text: str) -> None:
    assert format_bytes(n) == text


@pytest.mark.parametrize(
    ("s", "text"),
    [
        (0.0, "0 s"),
        (4.2e-8, "42.0 ns"),
        (2.76e-4, "276 µs"),
        (9.996e-4, "1.00 ms"),
        (1.5e-3, "1.50 ms"),
        (0.25, "250 ms"),
        (2.5, "2.50 s"),
        (1234.0, "1234 s"),
        (float("nan"), MISSING),
        (None, MISSING),
    ],
)
def test_times_read_in_ns_us_ms_or_s(s: float | None, text: str) -> None:
    assert format_seconds(s) == text


def test_ratios_differences_and_ranges() -> None:
    assert format_ratio(1.25) == "1.25" + TIMES and format_ratio(0.8) == "0.800" + TIMES
    assert format_ratio(None) == MISSING
    assert format_diff(0.0) == "0" and format_diff(3.812e-6) == "3.81e-06" and format_diff(math.inf) == "∞"
    assert format_range(24, 1536, "bytes") == "24 B to 1.50 KiB"
    assert format_range(1.001, 1.0012, "ratio") == "1.00" + TIMES  # alike once rounded: one figure
    assert span([None, 2.0, 0.5, None, 1.0]) == {"min": 0.5, "median": 1.0, "max": 2.0} and span([None]) is None


def test_axis_ticks_are_round_in_the_largest_unit_reached() -> None:
    assert [label for _, label in ticks(476, BYTE_SCALES)] == ["0 B", "200 B", "400 B", "600 B"]
    assert [label for _, label in ticks(3.2 * 2**20, BYTE_SCALES)][-1] == "4 MiB"
    assert [label for _, label in ticks(4.5e-4, SECOND_SCALES)] == ["0 µs", "200 µs", "400 µs", "600 µs"]


def _outcomes() -> list[Outcome]:
    case = Case("scale", lambda layout: Scale(), (2, 2), steps=(1, 2), rows=(1,), remote_memories=("host",))
    outcomes = []
    for i, v in enumerate(case.variants()):
        if v.skip_reason is not None:
            outcomes.append(Outcome(v, skipped=v.skip_reason))
            continue
        memory = {
            "normal": {"device_bytes": 1000, "host_bytes": 64, "temp": 0},
            "serialised": {"device_bytes": 500 + 250 * i, "host_bytes": 128, "temp": 16},
        }
        seconds = {"normal": 1e-3, "serialised": 1e-3 * (0.5 + 0.25 * i)}
        outcomes.append(Outcome(v, [TensorReport("y", 1e-6 * i, 1e-5, (0, 1), True)], memory, seconds))
    outcomes[1].tensors = [TensorReport("y", math.inf, math.inf, (), False)]  # shapes differ: no finite figure
    outcomes[2].error, outcomes[2].tensors = "Traceback (most recent call last):\nValueError: bad", []
    outcomes[2].memory, outcomes[2].seconds = {}, {}
    return outcomes


def test_the_document_has_units_in_its_names_and_summarises_each_case(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    write_json(_outcomes(), path, {"path": "s.png", "panels": []})
    document = json.loads(path.read_text())  # strict JSON: no NaN or infinity
    assert document["schema"] == "popxl-addons-harness-report/2"
    records = document["variants"]
    first = records[0]
    assert first["device_bytes_normal"] == 1000 and first["device_bytes_serialised"] == 500
    assert first["time_s_normal"] == 1e-3 and first["time_ratio"] == 0.5 and first["device_ratio"] == 0.5
    assert first["max_abs_diff"] == 0.0 and first["tensors"][0]["max_rel_diff"] == 1e-5
    assert records[1]["max_abs_diff"] is None and records[1]["verdict"] == "FAIL"
    assert records[2]["time_s_serialised"] is None and records[2]["verdict"] == "ERROR"
    (case,) = document["cases"]
    assert [case[k] for k in ("variants", "passed", "failed", "errors", "skipped")] == [6, 3, 1, 1, 1]
    # Ranges and the worst difference span the variants measured: 0, 1 (failed), 3 and 5; 2 erred, 4 skipped.
    ratios = {"min": 0.5, "median": 1.0, "max": 1.75}
    assert case["device_ratio"] == ratios and case["time_ratio"] == ratios
    assert case["max_abs_diff"] == pytest.approx(5e-6) and case["max_abs_diff_variant"] == records[5]["id"]
    groups = {(g["io_mode"], g["steps"]): g for g in case["groups"]}
    assert groups[("compute", 1)]["device_bytes_serialised"] == {"min": 500, "median": 500, "max": 500}
    assert groups[("io_overlapped", 1)]["measured"] == 0 and groups[("io_overlapped", 1)]["time_s_normal"] is None
    assert document["totals"]["variants"] == 6 and document["schedule_plot"] == {"path": "s.png", "panels": []}


def test_the_page_is_one_file_failures_first_figures_in_human_units(tmp_path: Path) -> None:
    path = tmp_path / "r.html"
    write_html(_outcomes(), path)
    page = path.read_text()
    assert page.index('id="summary"') < page.index('id="problems"') < page.index('id="cases"')
    assert "ValueError: bad" in page and "scale[io-steps1-rows1]" in page
    assert '"1000.0">1000 B</td>' in page and '"0.001">1.00 ms</td>' in page  # cells: the number and its reading
    assert f'0.500{TIMES} to 1.75{TIMES}, <span class="muted">median 1.00{TIMES}</span>' in page
    # Nothing to fetch: no external script, style, font or picture.
    assert "http://" not in page and "https://" not in page and 'src="http' not in page
    assert page.count("<svg") == 2 and "Not drawn: run the harness with" in page
    assert build(_outcomes())["totals"]["cases"] == 1
