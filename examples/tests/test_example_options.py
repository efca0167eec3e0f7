"""Every option each example's --help documents runs, at a small size, and prints finite losses and figures.

Each example runs as a user starts it, in a subprocess from the test's folder; one run per example gives
every option, with one micro-batch a step (host arrays without a transfers axis).
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1]

# One run of each example; "{out}" is the test's folder.
RUNS: dict[str, list[str]] = {
    "phased_training": ["--steps", "2", "--layers", "1", "--micro-batches", "1", "--float16",
                        "--png", "{out}/curves.png"],
    "gpt_phased": ["--steps", "2", "--layers", "1", "--micro-batches", "1", "--float32"],
}  # fmt: skip

NUMBER = r"[-+0-9.e]+|nan|inf"


def _run(script: str, args: list[str], folder: Path) -> str:
    command = [sys.executable, str(EXAMPLES / f"{script}.py"), *args]
    result = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _losses(stdout: str, steps: int) -> list[tuple[float, float]]:
    """The (phased, un-phased) loss of each step, checked to be finite."""
    rows = re.findall(rf"^ +(\d+)  ({NUMBER})  ({NUMBER})$", stdout, re.MULTILINE)
    assert [int(step) for step, _, _ in rows] == list(range(steps)), stdout
    losses = [(float(a), float(b)) for _, a, b in rows]
    assert all(math.isfinite(v) and v > 0 for pair in losses for v in pair), losses
    return losses


def _memory(stdout: str) -> dict[str, tuple[float, float]]:
    """Each program's device and host KiB, checked to be finite and the device's positive."""
    found = re.findall(rf"^(phased|unphased) +device +({NUMBER}) KiB, host +({NUMBER}) KiB", stdout, re.MULTILINE)
    memory = {name: (float(device), float(host)) for name, device, host in found}
    assert set(memory) == {"phased", "unphased"}, stdout
    assert all(math.isfinite(d) and d > 0 and math.isfinite(h) and h >= 0 for d, h in memory.values()), memory
    return memory


@pytest.mark.parametrize("script", list(RUNS))
def test_every_documented_option_is_run(script: str) -> None:
    command = [sys.executable, str(EXAMPLES / f"{script}.py"), "--help"]
    text = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True).stdout
    section = text.split("\noptions:\n")[-1]
    documented = {m.group(1) for m in re.finditer(r"^  (?:-\w, )?(--[a-z0-9-]+)", section, re.MULTILINE)}
    given = {a for a in RUNS[script] if a.startswith("--")}
    assert documented - {"--help"} == given


def test_phased_training(tmp_path: Path) -> None:
    stdout = _run("phased_training", [a.format(out=tmp_path) for a in RUNS["phased_training"]], tmp_path)
    for phased, unphased in _losses(stdout, 2):
        assert phased == pytest.approx(unphased, rel=2e-3)  # float16, as the example's own tests allow
    _memory(stdout)
    assert f"loss curves written to {tmp_path}/curves.png" in stdout
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_gpt_phased(tmp_path: Path) -> None:
    stdout = _run("gpt_phased", RUNS["gpt_phased"], tmp_path)
    assert "1 layers" in stdout and "float32" in stdout
    for phased, unphased in _losses(stdout, 2):
        assert phased == pytest.approx(unphased, rel=1e-5)
    worst = re.search(rf"the losses: ({NUMBER}), the trained weights: ({NUMBER})", stdout)
    assert worst is not None and all(math.isfinite(float(v)) for v in worst.groups()), stdout
    memory = _memory(stdout)
    assert memory["phased"][1] > memory["unphased"][1]  # the phased program's state lives on the host
    state = re.search(rf"Adam\) ({NUMBER}) KiB per replica, ({NUMBER}) KiB unsharded", stdout)
    assert state is not None and all(math.isfinite(float(v)) for v in state.groups()), stdout
    assert list(tmp_path.iterdir()) == []  # it writes nothing
