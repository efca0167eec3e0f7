"""The command line as a user meets it: a local module, bad input, verdicts, warnings and the table."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rich.console import Console

from popxl_addons.harness import Case, check
from popxl_addons.harness.report import repeated_warnings, table
from popxl_addons.layers import Scale

USER_MODULE = """
    import numpy as np
    from functools import partial
    import popxl
    from popxl import ops
    import popxl_addons.core as addons


    class Block(addons.Module):
        def build(self, x):
            w = self.add_variable_input("w", partial(np.full, x.shape[-1], 0.5), x.dtype)
            return ops.tanh(x) * w


    def block():
        return Block()


    NOT_A_MODULE = 3
"""


def _harness(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80"}
    command = [sys.executable, "-c", "from popxl_addons.harness.cli import main; raise SystemExit(main())", *args]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture
def user_folder(tmp_path: Path) -> Path:
    (tmp_path / "mymodel.py").write_text(textwrap.dedent(USER_MODULE))
    return tmp_path


@pytest.fixture
def harness_here(
    user_folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[..., tuple[int, str, str]]]:
    """The command line in this process, from the user's folder: its exit code, standard output and error.

    As `_harness` runs it but without starting Python and JAX again for each: what it prints and returns are
    the same; `test_a_local_module_is_checked_from_its_folder` runs it as a process."""
    monkeypatch.chdir(user_folder)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))  # main sets it where unset
    monkeypatch.setattr(sys, "path", list(sys.path))  # main puts the working folder first
    sys.modules.pop("mymodel", None)

    def run(*args: str) -> tuple[int, str, str]:
        from popxl_addons.harness.cli import main

        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse's errors
            code = e.code if isinstance(e.code, int) else 1
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    yield run
    sys.modules.pop("mymodel", None)


def test_a_local_module_is_checked_from_its_folder(user_folder: Path) -> None:
    result = _harness(
        user_folder, "mymodel:Block", "--input-shape", "2,4", "--steps", "1,2", "--rows", "1", "--jobs", "1",
        "--json", "r.json", "--plot", "s.png",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    records = json.loads((user_folder / "r.json").read_text())["variants"]
    verdicts = {r["verdict"] for r in records}
    assert verdicts == {"PASS", "SKIP"}
    assert "skipped 2 variant(s): io_overlapped needs at least 2 steps" in result.stdout
    assert "io_mode 'io_overlapped' needs" not in result.stdout + result.stderr
    assert (user_folder / "s.png").read_bytes()[:4] == b"\x89PNG"
    # Through a pipe, progress comes as plain lines on standard error, each fitting 80 columns.
    progress = [line for line in result.stderr.splitlines() if line.startswith("[harness] ")]
    assert progress and "variants (100%)" in progress[-1] and "[harness] " not in result.stdout
    assert all(len(line) <= 80 for line in progress)
    # A factory function works the same as a class.
    assert _harness(user_folder, "mymodel:block", "--input-shape", "2,4", "--steps", "2", "--rows", "1",
                    "--io-modes", "io", "--jobs", "1", "--no-measure").returncode == 0  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuchmodel:Block", "--input-shape", "2,4"], "cannot find module 'nosuchmodel': not in the working folder"),
        (["mymodel:Missing", "--input-shape", "2,4"], "module 'mymodel' ("),
        (["mymodel:NOT_A_MODULE", "--input-shape", "2,4"], "not a popxl_addons Module class or a function"),
        (["mymodel:Block"], "a TARGET needs --input-shape"),
        (["mymodel:Block", "--input-shape", "4,x"], "--input-shape takes comma-separated positive integers"),
        (["--steps", "0"], "--steps takes comma-separated positive integers"),
        (["--rows", "-1"], "--rows takes comma-separated positive integers"),
        (["--io-modes", "overlapped"], "--io-modes takes a comma-separated subset of compute,io,io_overlapped"),
        (["--jobs", "0"], "--jobs takes a number of worker processes >= 1"),
        (["mymodel:Block", "--input-shape", "2", "--kwargs", "{bad"], "--kwargs takes a JSON object"),
        (["--cases", "nope"], "--cases: unknown case(s) nope; built-in cases:"),
        (["--input-shape", "2,4"], "--input-shape describe(s) a TARGET (MODULE:ATTR), and none was given"),
        (["--grad", "--kwargs", '{"a": 1}'], "--kwargs, --grad describe(s) a TARGET"),
        (["--steps", "1000000"], "case scale: a variant of 2000000 micro-batches (steps x rows) is more than the 1024"),
        (["mymodel:Block", "--input-shape", "2", "--steps", "600", "--rows", "2"], "a variant of 1200 micro-batches"),
    ],
)
def test_bad_input_gets_one_clear_line(
    harness_here: Callable[..., tuple[int, str, str]], args: list[str], message: str
) -> None:
    code, stdout, stderr = harness_here(*args)
    output = stdout + stderr
    assert code == 2, output
    # The message is wrapped to 80 columns: compare it with the line breaks undone.
    assert message in " ".join(output.split())
    assert "Traceback" not in output
    assert len([line for line in output.splitlines() if "error" in line]) == 1


def test_a_module_that_cannot_be_built_is_an_error_not_a_mismatch(
    user_folder: Path, harness_here: Callable[..., tuple[int, str, str]]
) -> None:
    code, stdout, _ = harness_here("mymodel:Block", "--input-shape", "3,4", "--kwargs", '{"width": 2}',
                                   "--steps", "2", "--rows", "1", "--jobs", "1", "--json", "r.json",
                                   "--remote-memories", "host")  # fmt: skip
    assert code == 1
    records = json.loads((user_folder / "r.json").read_text())["variants"]
    assert {r["verdict"] for r in records} == {"ERROR"}
    assert all("Traceback" in r["error"] and "unexpected keyword argument 'width'" in r["summary"] for r in records)
    assert "Traceback" not in stdout
    assert "could not be built or run (tracebacks in r.json)" in stdout
    # Tried once and said once, not once per variant.
    assert stdout.count("unexpected keyword argument 'width'") == 1, stdout
    assert "case Block: the module cannot be built (3 variant(s) not run)" in stdout


def test_verdicts_distinguish_pass_fail_error_and_skip() -> None:
    case = Case("scale", lambda layout: Scale(), (2, 2), steps=(1, 2), rows=(1,), remote_memories=("host",))
    kinds = {v.io_mode + str(v.steps): check(v).verdict for v in case.variants()}
    assert kinds["io_overlapped1"] == "SKIP" and kinds["io_overlapped2"] == "PASS"
    broken = Case("broken", lambda layout: None, (2, 2), steps=(2,), rows=(1,), io_modes=("io",))  # type: ignore[arg-type,return-value]
    assert check(broken.variants()[0]).verdict == "ERROR"


def test_the_table_fits_80_columns_identity_and_verdict_first() -> None:
    case = Case("scale", lambda layout: Scale(), (2, 2), steps=(2,), rows=(1,), io_modes=("io",))
    outcomes = [check(v, measure=True) for v in case.variants()]
    for width in (80, 160):
        console = Console(width=width, record=True, file=io.StringIO())
        console.print(table(outcomes, width))
        text = console.export_text()
        lines = text.splitlines()
        assert max(len(line) for line in lines) <= width
        header = next(line for line in lines if "variant" in line)
        assert header.index("variant") < header.index("verdict")
        assert ("time normal/serial" in text) == (width >= 160)
        cells = "".join(line.split("│")[1] for line in lines if line.startswith("│"))
        assert "scale[io-steps2-rows1-host]" in cells.replace(" ", "")


def test_a_repeated_warning_is_shown_once_with_its_count() -> None:
    case = Case("scale", lambda layout: Scale(), (2, 2), steps=(2,), rows=(1,), io_modes=("io",))
    outcomes = [check(v) for v in case.variants()]
    for o in outcomes:
        o.warnings = ["io_tile_exchange verifies nothing here", *o.warnings]
    lines = repeated_warnings(outcomes)
    assert lines[0] == f"warning ({len(outcomes)}x): io_tile_exchange verifies nothing here"


def test_large_variants_are_announced(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from popxl_addons.harness import cli

    monkeypatch.setattr(cli, "LARGE_MICRO_BATCHES", 3)
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    argv = ["--cases", "scale", "--steps", "4", "--rows", "1", "--io-modes", "compute", "--jobs", "1"]
    code = cli.main([*argv, "--remote-memories", "host", "--no-measure"])
    captured = capsys.readouterr()
    output = " ".join((captured.out + captured.err).split())
    assert code == 0
    assert "10 variant(s) of more than 3 micro-batches (up to 4): each unrolled reference takes minutes" in output
