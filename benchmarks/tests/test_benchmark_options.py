"""Every option each benchmark's --help documents runs, at a small size, and gives finite figures.

Each run is a subprocess, as a user starts it, writing under the test's folder (`--out`). The runs combine
options so that each appears at least once; `test_every_documented_option_is_run` keeps that true as options
are added. `--device gpu` is left to benchmarks/gpu.sh: these runs give `--device cpu`.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1]

# The runs of each script, `--out` added by `_run`. Sizes are the smallest that still exercise what each option
# selects (e.g. a step count of 1 beside 2, so that io_overlapped is skipped once).
RUNS: dict[str, list[list[str]]] = {
    "build_scaling": [
        ["--batch", "1", "--seq", "8", "--width", "16", "--hidden", "32", "--blocks", "1",
         "--repeats", "1", "--compile-repeats", "1"],
    ],
    "compile_scaling": [["--repeats", "1", "--batch", "2"]],
    "replication": [["--size", "8", "--layers", "1", "--repeats", "1"]],
    "batch_serialisation": [
        ["--width", "8", "--layers", "1", "--batch", "8", "--steps", "1,2", "--io-modes", "io,io_overlapped",
         "--repeats", "1", "--device", "cpu", "--store-steps", "2"],
    ],
    "planner": [
        # Sizes at which the largest budget has a plan: activations, not weights, dominate.
        ["--width", "32", "--layers", "1", "--batch", "512", "--steps", "4,8", "--io-modes", "compute",
         "--repeats", "1", "--device", "cpu"],
        ["--model", "transformer", "--width", "8", "--layers", "1", "--seq", "16", "--heads", "2", "--batch", "8",
         "--steps", "2", "--io-modes", "compute", "--repeats", "1"],
    ],
    "gpt_phased": [
        # One micro-batch a step: its host arrays take no transfers axis.
        ["--layers", "1", "--width", "32", "--heads", "2", "--vocab", "64", "--sequence", "8", "--micro", "2",
         "--micro-batches", "1", "--float16", "--repeats", "1", "--matmul-size", "32", "--device", "cpu"],
        ["--small", "--micro-batches", "2", "--repeats", "1", "--matmul-size", "32"],
    ],
    "gpt_scale": [
        ["--small", "--sizes", "tiny", "--dtypes", "float16", "--sequence", "16", "--micro-batches", "2",
         "--steps", "1", "--device", "cpu", "--probe-bytes", "67108864", "--matmul-size", "256"],
        # The state in the device's memory and in files of a folder given, with no JAX baseline.
        ["--small", "--dtypes", "float32", "--sequence", "16", "--steps", "1", "--tiers", "device,disk",
         "--no-jax", "--remote-dir", "remote", "--probe-bytes", "67108864", "--matmul-size", "256"],
    ],
}  # fmt: skip

# The figures' values, not the machine's speed, are what these runs check: XLA's cheapest compile keeps
# the planner's dozens of compiles in seconds.
FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"

# Runs every script given with --help in one interpreter (JAX imported once) and prints {script: help}.
HELP_DRIVER = """
import contextlib, io, json, runpy, sys
helps = {}
for path in sys.argv[1:]:
    sys.argv = [path, "--help"]
    text = io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
        runpy.run_path(path, run_name="__main__")
    helps[path] = text.getvalue()
print(json.dumps(helps))
"""


def documented_options(scripts: list[Path]) -> dict[str, set[str]]:
    """Each script's long options, as its --help lists them."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCHMARKS), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-c", HELP_DRIVER, *map(str, scripts)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=True)
    helps: dict[str, str] = json.loads(result.stdout.splitlines()[-1])
    options = {}
    for path, text in helps.items():
        section = text.split("\noptions:\n")[-1]
        found = {m.group(1) for m in re.finditer(r"^  (?:-\w, )?(--[a-z0-9-]+)", section, re.MULTILINE)}
        options[Path(path).stem] = found - {"--help"}
    return options


def _run(script: str, args: list[str], out: Path) -> str:
    """Run a benchmark writing under `out`; its standard output."""
    env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE}".strip()}
    command = [sys.executable, str(BENCHMARKS / f"{script}.py"), *args, "--out", str(out)]
    # From the test's folder: a path the script takes relative to the working folder lands there too.
    result = subprocess.run(command, cwd=out.parent, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _numbers(value: Any) -> list[float]:
    """Every number in a JSON value."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return []


def _figures(out: Path, name: str, stdout: str) -> dict[str, Any]:
    """The run's JSON, checked to be where it says it wrote it and to hold only finite numbers."""
    path = out / f"{name}.json"
    assert f"{path}" in stdout, stdout
    figures: dict[str, Any] = json.loads(path.read_text())
    numbers = _numbers(figures)
    assert numbers and all(math.isfinite(n) for n in numbers), figures
    return figures


def _picture(out: Path, name: str, stdout: str) -> None:
    path = out / f"{name}.png"
    assert f"picture in {path}" in stdout and path.read_bytes()[:4] == b"\x89PNG"


def _positive(*values: float) -> None:
    assert all(math.isfinite(v) and v > 0 for v in values), values


def test_every_documented_option_is_run() -> None:
    scripts = [BENCHMARKS / f"{name}.py" for name in RUNS]
    for name, options in documented_options(scripts).items():
        given = {a for run in RUNS[name] for a in run if a.startswith("--")} | {"--out"}
        assert options == given, (
            f"{name}: documented but not run {options - given}, run but not documented {given - options}"
        )


def test_build_scaling(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stdout = _run("build_scaling", RUNS["build_scaling"][0], out)
    f = _figures(out, "build_scaling", stdout)
    assert (f["tokens"], f["width"], f["hidden"], f["blocks"]) == (8, 16, 32, 1)
    _positive(f["build_popxl_s"], f["trace_jax_s"], f["compile_popxl_s"], f["compile_jax_s"], f["popxl_ops"])
    assert "build + autodiff" in stdout and "Session compile" in stdout
    _picture(out, "build_scaling", stdout)


def test_compile_scaling(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stdout = _run("compile_scaling", RUNS["compile_scaling"][0], out)
    f = _figures(out, "compile_scaling", stdout)
    assert f["mlp_forward_batch"] == 2
    _positive(f["mlp_popxl_s"], f["mlp_jax_s"], f["mlp_ratio_popxl_over_jax"])
    assert "compile(repeat 256) / compile(repeat 2)" in stdout
    _picture(out, "compile_scaling", stdout)


def test_replication(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stdout = _run("replication", RUNS["replication"][0], out)
    f = _figures(out, "replication", stdout)
    assert f["replicas"] == 8 and f["devices_visible"] >= 8
    _positive(f["devices_s"], f["simulate_s"])
    assert "1 x 3 all-reduces of 8x8" in stdout
    _picture(out, "replication", stdout)


def test_batch_serialisation(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stdout = _run("batch_serialisation", RUNS["batch_serialisation"][0], out)
    f = _figures(out, "batch_serialisation", stdout)
    assert (f["width"], f["layers"], f["batch"]) == (8, 1, 8) and "cpu" in f["device"].lower()
    # io_overlapped needs 2 steps: it is skipped at 1.
    assert [(r["steps"], r["io_mode"]) for r in f["runs"]] == [(1, "io"), (2, "io"), (2, "io_overlapped")]
    for r in f["runs"]:
        _positive(*r["seconds"].values(), *(m["device_bytes"] for m in r["memory"].values()))
        assert set(r["seconds"]) == {"host", "device", "host_unchecked", "normal", "jax_accum", "jax_offload"}
    assert [c["steps"] for c in f["store_cost"]] == [2]
    _positive(*f["store_cost"][0]["seconds"].values())
    _picture(out, "batch_serialisation", stdout)


@pytest.mark.slow
@pytest.mark.parametrize("run", [0, 1], ids=["mlp", "transformer"])
def test_planner(tmp_path: Path, run: int) -> None:
    out = tmp_path / "out"
    args = RUNS["planner"][run]
    model = "transformer" if "--model" in args else "mlp"
    stdout = _run("planner", args, out)
    f = _figures(out, f"planner_{model}", stdout)
    assert f["model"] == model and f["layers"] == 1 and f["seq"] == (16 if model == "transformer" else None)
    steps = {4, 8} if model == "mlp" else {2}
    assert {c["steps"] for c in f["candidates"]} == steps and {c["io_mode"] for c in f["candidates"]} == {"compute"}
    _positive(*(c["seconds"] for c in f["candidates"]), *(c["device_bytes"] for c in f["candidates"]))
    assert [b["share"] for b in f["budgets"]] == [0.6, 0.3, 0.15]
    # The largest budget has a plan within it, compiled and timed against the exhaustive best.
    best = f["budgets"][0]
    assert best["planner"]["device_bytes"] <= best["budget"], best
    _positive(best["planner"]["seconds"], best["time_vs_exhaustive"], best["planning_seconds"])
    for b in f["budgets"]:
        assert "planner" in b or "No plan fits" in b["planner_error"]


@pytest.mark.parametrize("run", [pytest.param(0, marks=pytest.mark.slow), 1], ids=["one_micro_batch_float16", "small"])
def test_gpt_phased(tmp_path: Path, run: int) -> None:
    out = tmp_path / "out"
    stdout = _run("gpt_phased", RUNS["gpt_phased"][run], out)
    f = _figures(out, "gpt_phased", stdout)
    if run == 0:
        assert f["config"] == {"vocab": 64, "width": 32, "heads": 2, "layers": 1, "sequence": 8, "micro": 2, "steps": 1}
        assert f["dtype"] == "float16" and f["tokens_per_step"] == 16
    else:  # --small: 2 layers of width 128, sequences of 64
        assert f["config"] == {
            "vocab": 512,
            "width": 128,
            "heads": 4,
            "layers": 2,
            "sequence": 64,
            "micro": 1,
            "steps": 2,
        }
        assert f["dtype"] == "float32"
    assert set(f["programs"]) == {"phased", "unphased", "jax"}
    for name, program in f["programs"].items():
        _positive(program["seconds_per_step"], program["memory"]["device_bytes"], program["fraction_of_machine_matmul"])
        assert len(f["losses"][name]) == 2  # the warm-up step and one timed
    assert "first loss" in stdout


@pytest.mark.slow
def test_gpt_scale(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stdout = _run("gpt_scale", RUNS["gpt_scale"][0], out)
    f = _figures(out, "gpt_scale", stdout)
    assert f["settings"] == {"vocab": 512, "sequence": 16, "micro_batches": 2, "device": "cpu"}
    assert f["sizes"] == {"tiny": {"layers": 2, "width": 64, "heads": 2}}
    assert [(r["program"], r["size"], r["dtype"], r["outcome"]) for r in f["runs"]] == [
        ("phased", "tiny", "float16", "trained"),
        ("disk", "tiny", "float16", "trained"),
        ("jax", "tiny", "float16", "trained"),
    ]
    phased, disk, jax = f["runs"]
    assert phased["parameters"] == disk["parameters"] == jax["parameters"]
    # The state on disk: what the OS read and wrote for the disk tier, a timeline of the last step, the disk's
    # own bandwidth and the matmul peak measured in the same run.
    assert disk["os_bytes_per_step"]["write_bytes"] >= disk["state_bytes"]["weights"]
    assert phased["os_bytes_per_step"]["write_bytes"] < disk["state_bytes"]["weights"]
    trace = json.loads((out / f"{disk['timeline']}.json").read_text())
    lanes = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert {"compute", "program: load", "program: store", "disk: reads", "disk: writes"} == lanes
    assert (out / f"{disk['timeline']}.png").stat().st_size > 0
    machine = f["machine"]
    _positive(machine["disk"]["read_bytes_per_s"], machine["disk"]["write_bytes_per_s"])
    _positive(machine["matmul_flops_per_s"]["float16"], disk["flops_per_step"])
    assert "disk busy" in stdout
    mine, theirs = phased["state_bytes"], jax["state_bytes"]
    assert (mine["weights"], mine["gradients"]) == (theirs["weights"], theirs["gradients"])
    assert 0 <= mine["adam"] - theirs["adam"] < 1024  # popxl's Adam counts steps per weight, JAX's once
    assert set(phased["seconds"]) == {"build", "attach", "compile", "first_step"}
    assert set(jax["seconds"]) == {"build", "compile", "first_step"}
    for r in f["runs"]:
        assert len(r["losses"]) == 2  # the first step and one timed
        _positive(r["step_s"], r["peak_rss_bytes"], r["memory"]["device_bytes"], *r["losses"])
    # Random tokens: both models start near the uniform guess, ln(512).
    assert all(abs(r["losses"][0] - math.log(512)) < 0.5 for r in f["runs"])
    assert f["largest_phased"]["float16"]["trained"] == "tiny" and "every size given trained" in stdout


@pytest.mark.slow
def test_gpt_scale_tiers(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stdout = _run("gpt_scale", RUNS["gpt_scale"][1], out)
    f = _figures(out, "gpt_scale", stdout)
    assert [(r["program"], r["outcome"]) for r in f["runs"]] == [("device", "trained"), ("disk", "trained")]
    assert f["machine"]["remote_dir"] == str((tmp_path / "remote").resolve())
    device, disk = f["runs"]
    assert device["memory"]["disk_bytes"] == 0 < disk["memory"]["disk_bytes"]
    loaded = disk["tier_bytes_last_step"]["load"]
    assert loaded > 0 and device["os_bytes_per_step"]["read_bytes"] < loaded / 10


def test_gpt_scale_sweep_stops_at_the_first_size_that_does_not_fit() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    from gpt_scale import Spec, sweep

    def run(spec: Spec) -> dict[str, Any]:
        if spec.program == "phased" and spec.size == "medium" and spec.dtype == "float32":
            return {"outcome": "out_of_memory", "error": "too big"}
        return {"outcome": "trained", "parameters": 1, "program": spec.program, "size": spec.size}

    specs = {
        dtype: [Spec("phased", size, dtype, 512, 16, 1, 1, "cpu") for size in ("small", "medium", "large")]
        for dtype in ("float32", "float16")
    }
    runs, largest = sweep(specs, run)
    # float32: small phased and JAX, then medium does not fit and large is not tried; float16 runs all three.
    assert len(runs) == 3 + 6
    assert largest["float32"] == {"trained": "small", "parameters": 1, "stopped_at": "medium", "reason": "too big"}
    assert largest["float16"]["trained"] == "large" and largest["float16"]["stopped_at"] is None
