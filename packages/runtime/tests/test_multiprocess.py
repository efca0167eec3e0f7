"""One program across two processes on this machine, through JAX's distributed runtime on loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_two_processes_run_four_replicas() -> None:
    worker = Path(__file__).with_name("multiprocess_worker.py")
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), str(port), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = []
    for p in procs:
        out, _ = p.communicate(timeout=240)
        outputs.append(out)
    for i, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, out
        assert f"process {i} ok" in out
