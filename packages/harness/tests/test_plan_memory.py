"""`popxl-addons-harness plan` on a global batch this machine cannot hold: the clear error, not a kill by the OS."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from popxl.lowering import fit

MODULE = """
    from popxl_addons.layers import Linear


    def Block():
        return Linear(8)
"""
WIDTH = 1024


@pytest.mark.skipif(fit.host_available() is None, reason="this machine's available memory cannot be read")
def test_a_global_batch_larger_than_the_machine_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mymodel.py").write_text(textwrap.dedent(MODULE))
    available = fit.host_available()
    assert available is not None
    # 1.5 times what the machine has available now, in float32 samples of WIDTH: it cannot fit by luck.
    batch = int(1.5 * available / (WIDTH * 4))
    args = ["plan", "mymodel:Block", "--input-shape", str(WIDTH), "--global-batch", str(batch), "--budget", "1GiB"]
    command = [sys.executable, "-c", "from popxl_addons.harness.cli import main; raise SystemExit(main())", *args]
    env = {k: v for k, v in os.environ.items() if k != fit.CHECK_VARIABLE}
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 1, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    flat = " ".join(done.stdout.split())  # wrapped to 80 columns wherever its words fall
    assert "no plan:" in flat and "of host memory, but this" in flat
    assert "stream 'x'" in flat and "To fit:" in flat
    assert all(len(line) <= 80 for line in (done.stdout + done.stderr).splitlines())
