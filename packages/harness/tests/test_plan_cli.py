"""`popxl-addons-harness plan`: the plan and its evidence on standard output, progress in a log."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from rich.console import Console

from popxl_addons.harness import cli
from popxl_addons.harness.plan_cli import parse_bytes

MODULE = """
    from functools import partial
    import numpy as np
    from popxl import ops
    import popxl_addons.core as addons


    class Block(addons.Module):
        def build(self, x):
            w = self.add_variable_input("w", partial(np.full, x.shape[-1], 0.5), x.dtype)
            return ops.tanh(x) * w
"""


def _harness(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from popxl_addons.harness.cli import main; raise SystemExit(main())", *args]
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture
def user_folder(tmp_path: Path) -> Path:
    (tmp_path / "mymodel.py").write_text(textwrap.dedent(MODULE))
    return tmp_path


def test_sizes_parse_with_units() -> None:
    assert parse_bytes("2GiB") == 2 * 2**30
    assert parse_bytes("1.5 MB") == 1_500_000
    assert parse_bytes("4096") == 4096
    for bad in ("2 parsecs", "-1GiB", "GiB"):
        with pytest.raises(argparse.ArgumentTypeError, match="--budget takes a size such as 2GiB"):
            parse_bytes(bad)


@pytest.mark.slow
def test_a_plan_is_printed_and_checked(user_folder: Path) -> None:
    args = ["plan", "mymodel:Block", "--input-shape", "4", "--global-batch", "8", "--steps", "2,4"]
    result = _harness(user_folder, *args, "--budget", "1GiB", "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "io_mode=" in result.stdout and "compiled" in result.stdout and "tanh_out (" in result.stdout
    assert "Block[" in result.stdout and ": PASS" in result.stdout
    progress = [line for line in result.stderr.splitlines() if line.startswith("[plan]")]
    assert progress and all(len(line) <= 80 for line in progress) and "[plan]" not in result.stdout
    nothing = _harness(user_folder, *args, "--budget", "100B")
    assert nothing.returncode == 1 and "no plan: No plan fits a device budget of 100 B" in nothing.stdout


def test_log_progress_fits_80_columns_and_comes_every_few_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    lines: list[str] = []
    console = Console(width=200)
    monkeypatch.setattr(console, "print", lambda line, **kw: lines.append(line))
    progress = cli._PlainProgress(console, 100)

    class Long:
        id = "a_case_with_a_long_name[io_overlapped-steps16-rows2-store_callable-load_buffer-tp4xdp2-host]"

    for _ in range(100):
        clock[0] += 0.5
        progress.advance(Long())  # type: ignore[arg-type]
    assert 8 <= len(lines) <= 11
    assert all(len(line) <= 80 for line in lines) and "100/100" in lines[-1]
