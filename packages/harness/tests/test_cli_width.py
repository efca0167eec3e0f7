"""Every line `popxl-addons-harness` prints fits 80 columns in a log: help, errors, reports and plans."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from popxl_addons.harness import cli, plan_cli
from popxl_addons.harness.cases import Variant
from popxl_addons.harness.equivalence import Outcome, TensorReport

WIDTH = 80

MODULE = """
    from functools import partial
    import numpy as np
    from popxl import ops
    import popxl_addons.core as addons


    class Block(addons.Module):
        def build(self, x):
            w = self.add_variable_input("w", partial(np.full, x.shape[-1], 0.5), x.dtype)
            return ops.tanh(x) * w


    class Broken(addons.Module):
        def __init__(self):
            super().__init__()
            raise ValueError("this module cannot be built: " + "its configuration is wrong, " * 6)
"""


def _too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH]


def _has(text: str, message: str) -> bool:
    """Whether `message` is in `text` once wrapping is undone (long words, such as paths, may be broken)."""
    return "".join(message.split()) in "".join(text.split())


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a user module, deep enough that its path alone is wider than a line, and no terminal."""
    folder = tmp_path / ("a_folder_with_a_long_name_" * 4)
    folder.mkdir()
    (folder / "widthmodel.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.chdir(folder)
    monkeypatch.delenv("COLUMNS", raising=False)
    # main() imports from and sets these for its run: undone after the test.
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    return folder


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    try:
        code = cli.main(list(args))
    except SystemExit as e:  # argparse: --help and bad arguments
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out + err


def test_fit_wraps_long_lines_keeping_every_character() -> None:
    text = "  " + "word " * 30 + "\nshort\n" + "x" * 200
    fitted = cli.fit(text)
    assert not _too_wide(fitted)
    assert "".join(fitted.split()) == "".join(text.split())
    lines = fitted.splitlines()
    assert lines[0].startswith("  word") and lines[1].startswith("    word") and "short" in lines
    assert lines[-2:] == ["  " + "x" * 78, "  " + "x" * 42] and lines[-3] == "x" * 80


@pytest.mark.parametrize("columns", [None, "200"])
@pytest.mark.parametrize("args", [["--help"], ["plan", "--help"]])
def test_help_fits(
    log: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, args: list[str], columns: str | None
) -> None:
    if columns is not None:  # a wide terminal's COLUMNS, exported into a log
        monkeypatch.setenv("COLUMNS", columns)
    code, output = _main(capsys, *args)
    assert code == 0 and "--input-shape" in output and "--io-modes" in output
    assert not _too_wide(output), output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--steps", "0"], "--steps takes comma-separated positive integers, e.g. 4,8; got '0'"),
        (["--io-modes", "overlapped"], "subset of compute,io,io_overlapped; got 'overlapped'"),
        (["widthmodel:Block", "--input-shape", "2", "--kwargs", "{bad"], "--kwargs takes a JSON object"),
        (["--cases", "nope"], "built-in cases: ffn_tp, linear_grad, norm_linear, scale"),
        (["nosuchmodel:Block", "--input-shape", "2,4"], "a_folder_with_a_long_name_ nor on the import path"),
        (["widthmodel:Block"], "a TARGET needs --input-shape"),
        (["plan", "widthmodel:Block"], "the following arguments are required: --input-shape, --global-batch"),
        (["plan", "widthmodel:Block", "--input-shape", "4", "--global-batch", "8", "--budget", "2 parsecs"],
         "--budget takes a size such as 2GiB"),
        (["plan", "nosuchmodel:Block", "--input-shape", "4", "--global-batch", "8", "--budget", "1GiB"],
         "cannot find module 'nosuchmodel'"),
    ],
)  # fmt: skip
def test_bad_input_fits(log: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code, output = _main(capsys, *args)
    assert code == 2
    assert _has(output, message), output  # wrapped, not cut
    assert not _too_wide(output), output


@pytest.mark.slow
def test_a_check_fits_in_a_log(log: Path) -> None:
    """The real thing, through pipes: the results, the figures they had no room for, the skipped and progress."""
    args = ["--cases", "scale", "--steps", "1", "--rows", "1", "--io-modes", "io,io_overlapped",
            "--remote-memories", "host", "--jobs", "1", "--json", "r.json"]  # fmt: skip
    command = [sys.executable, "-c", "from popxl_addons.harness.cli import main; raise SystemExit(main())", *args]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    result = subprocess.run(command, cwd=log, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS" in result.stdout and "skipped 10 variant(s): io_overlapped" in result.stdout
    # 80 columns leave no room for the figures in the results table: they follow it, not dropped.
    figures = result.stdout.split("Figures per variant")[1]
    assert "device normal/serial" in figures and "time normal/serial" in figures
    assert "[harness] 10/10 variants" in result.stderr
    assert not _too_wide(result.stdout) and not _too_wide(result.stderr), result.stdout + result.stderr


def test_a_broken_module_fits(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, output = _main(capsys, "widthmodel:Broken", "--input-shape", "2,4", "--steps", "2", "--rows", "1",
                         "--io-modes", "io", "--remote-memories", "host", "--jobs", "1")  # fmt: skip
    assert code == 1
    assert "case Broken: the module cannot be built (1 variant(s) not run):" in output
    assert _has(output, "its configuration is wrong, " * 6)
    assert not _too_wide(output), output


def test_failures_errors_and_warnings_fit(
    log: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failing tensors, errors and warnings with long names, as a model of real size would give."""
    long_name = "layers.11.attention.output_projection.weight_gradient_accumulator"
    warning = "io_tile_exchange verifies nothing on this backend, " * 3

    def fake_check(variant: Variant, measure: bool = False) -> Outcome:
        if variant.rows == 1:
            tensor = TensorReport(long_name, 0.123, 4.56, (1023, 4095, 63), False)
            return Outcome(variant, tensors=[tensor], warnings=[warning])
        return Outcome(variant, error="Traceback (most recent call last):\nRuntimeError: " + "it broke, " * 12)

    monkeypatch.setattr(cli, "check", fake_check)
    code, output = _main(capsys, "--cases", "scale", "--steps", "2", "--rows", "1,2", "--io-modes", "io",
                         "--remote-memories", "host", "--jobs", "1", "--no-measure", "--json", "r.json")  # fmt: skip
    assert code == 1
    assert _has(output, f"{long_name}:") and "0.123" in output and "[MISMATCH]" in output
    assert _has(output, f"warning (10x): {warning}")
    assert _has(output, "10 variant(s) could not be built or run (tracebacks in r.json)")
    assert not _too_wide(output), output


def test_a_plan_and_its_check_fit(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["widthmodel:Block", "--input-shape", "4", "--global-batch", "8", "--steps", "2"]
    assert plan_cli.main([*args, "--budget", "1GiB", "--check"]) == 0
    assert plan_cli.main([*args, "--budget", "100B"]) == 1
    out, err = capsys.readouterr()
    assert "io_mode=" in out and "tanh_out (" in out and ": PASS" in out
    assert _has(out, "no plan: No plan fits a device budget of 100 B")
    assert not _too_wide(out) and not _too_wide(err), out + err
