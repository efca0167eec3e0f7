"""The harness itself: ids, validation, catching a broken transform, reports, plots and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import popxl
from popxl_addons.core.transforms.batch_serialisation import handles
from popxl_addons.harness import BUILTIN_CASES, Case, Layout, check
from popxl_addons.harness.cli import main
from popxl_addons.harness.programs import serialised_program
from popxl_addons.harness.schedule import schedule
from popxl_addons.layers import Scale

SCALE = Case("scale", lambda layout: Scale(), (2, 2), steps=(3,), rows=(1,), io_modes=("io_overlapped",))


def test_builtin_matrix_is_large_and_ids_are_readable() -> None:
    variants = [v for c in BUILTIN_CASES for v in c.variants()]
    assert len(variants) >= 150
    ids = [v.id for v in variants]
    assert len(set(ids)) == len(ids)
    assert "ffn_tp[io_overlapped-steps4-rows1-tp4xdp2-host]" in ids
    assert "ffn_tp[io_overlapped-steps4-rows1-tp4xdp2-device]" in ids
    assert "scale[io-steps4-rows2-store_callable-load_buffer-host]" in ids


def test_case_validation() -> None:
    with pytest.raises(ValueError, match="unknown io_mode"):
        Case("bad", lambda layout: Scale(), (2,), io_modes=("fast",))
    with pytest.raises(ValueError, match="unknown remote memory"):
        Case("bad", lambda layout: Scale(), (2,), remote_memories=("hbm",))
    with pytest.raises(ValueError, match="unknown store kind"):
        Case("bad", lambda layout: Scale(), (2,), stores=("disk",))
    with pytest.raises(ValueError, match="forward-only"):
        Case("bad", lambda layout: Scale(), (2,), grad=True, chain=2)
    assert Layout(4, 2).label == "tp4xdp2" and Layout().replication == 1


_slot = handles.RemoteHandle.slot


def one_step_late(self: handles.RemoteHandle, index: popxl.Tensor, steps: int) -> popxl.Tensor:
    """A broken transform: step i's value goes to step i + 1's slot, wrapping within the row."""
    late = (index % steps + 1) % steps + (index / steps) * steps
    return _slot(self, late, steps)


def test_a_broken_transform_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    variant = SCALE.variants()[0]
    assert check(variant).passed
    monkeypatch.setattr(handles.RemoteHandle, "slot", one_step_late)
    outcome = check(variant)
    assert not outcome.passed
    assert "y: max abs" in outcome.report() and "MISMATCH" in outcome.report()


def test_a_failing_build_is_reported_not_raised() -> None:
    case = Case("broken", lambda layout: Scale(), (2, 2), steps=(2,), rows=(1,), io_modes=("compute",), grad=True)
    bad = Case("wrong_shape", lambda layout: None, (2, 2), steps=(2,), rows=(1,), io_modes=("compute",))  # type: ignore[arg-type,return-value]
    assert check(case.variants()[0]).passed
    outcome = check(bad.variants()[0])
    assert not outcome.passed and outcome.error is not None and "create_graph" in outcome.error


def test_schedule_of_overlapped_io_leads_loads_and_lags_stores() -> None:
    program = serialised_program(SCALE.variants()[0])
    assert program.serialised is not None and program.compute is not None
    events = schedule(program.serialised, program.compute)
    order = [(e.lane, e.step) for e in sorted(events, key=lambda e: e.position)]
    assert order == [
        ("load", 0),
        ("load", 1),
        ("compute", 0),
        ("load", 2),
        ("store", 0),
        ("compute", 1),
        ("store", 1),
        ("compute", 2),
        ("store", 2),
    ]
    assert {e.tile_set for e in events if e.lane != "compute"} == {"io"}


def test_cli_reports_and_plots(tmp_path: Path) -> None:
    out_json, out_html, out_png = tmp_path / "r.json", tmp_path / "r.html", tmp_path / "s.png"
    code = main(
        [
            "--cases",
            "scale_sequence",
            "--steps",
            "2",
            "--rows",
            "1",
            "--jobs",
            "1",
            "--json",
            str(out_json),
            "--html",
            str(out_html),
            "--plot",
            str(out_png),
        ]
    )
    assert code == 0
    document = json.loads(out_json.read_text())
    records = document["variants"]
    assert len(records) == 6 and all(r["passed"] for r in records)
    assert {(r["io_mode"], r["remote_memory"]) for r in records} == {
        (mode, memory) for mode in ("compute", "io", "io_overlapped") for memory in ("host", "device")
    }
    assert all(r["device_bytes_serialised"] >= 0 and r["time_s_serialised"] > 0 for r in records)
    # Stored outputs live in the remote buffer: in host memory with host placement, on the device otherwise.
    for r in records:
        assert (r["host_bytes_serialised"] > 0) == (r["remote_memory"] == "host")
    (case,) = document["cases"]
    assert case["passed"] == 6 and case["time_ratio"]["min"] > 0
    # The plot is named in the JSON and shown in the HTML, one panel per io_mode.
    assert [p["io_mode"] for p in document["schedule_plot"]["panels"]] == ["compute", "io", "io_overlapped"]
    assert {p["variant"] for p in document["schedule_plot"]["panels"]} <= {r["id"] for r in records}
    page = out_html.read_text()
    assert "All 6 variants that ran match" in page and "data:image/png;base64," in page
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_checks_a_user_module_and_fails_on_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    args = [
        "popxl_addons.layers:Linear",
        "--input-shape",
        "2,3",
        "--steps",
        "2",
        "--rows",
        "1",
        "--jobs",
        "1",
        "--no-measure",
    ]
    assert main(args) == 1  # Linear needs out_features: every variant reports the TypeError.
    assert main([*args, "--kwargs", '{"out_features": 4}', "--grad"]) == 0
    assert main(["popxl_addons.layers:Scale", *args[1:]]) == 0
    monkeypatch.setattr(handles.RemoteHandle, "slot", one_step_late)
    assert main(["popxl_addons.layers:Scale", *args[1:], "--io-modes", "compute"]) == 1


def test_measurements_are_recorded() -> None:
    outcome = check(SCALE.variants()[0], measure=True)
    assert outcome.passed and outcome.memory["serialised"]["device_bytes"] > 0
    assert np.isfinite(outcome.seconds["normal"]) and np.isfinite(outcome.seconds["serialised"])
