"""One MPI rank of a poprun launch through mpirun: runs that rank's instance and reports on it to poprun.

    python -m popdist._rank program [args]

mpirun starts this once per rank (see `popdist._mpi`). It takes the rank's own variables from poprun's
list, connects to poprun (a report connection, then one for the instance's stdout and one for its
stderr), starts the instance in a process group of its own with those connections as its stdout and
stderr, and reports the instance's pid and then how it ended. The instance inherits this process's MPI
variables, so it is the rank as far as the MPI library is concerned. Signals that mpirun sends to stop
the job are passed on to the instance, and this process exits as the instance did.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any

from popdist import _mpi
from popdist._instances import die_with_parent


def _connect(path: str, rank: int, kind: str) -> socket.socket:
    """A connection to poprun, once poprun has taken it."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(_mpi.CONNECT_TIMEOUT_S)
    conn.connect(path)
    conn.sendall((json.dumps({"rank": rank, "kind": kind}) + "\n").encode())
    answer = b""
    while not answer.endswith(b"\n"):
        chunk = conn.recv(16)
        if not chunk:
            raise ConnectionError(f"poprun closed the {kind} connection of rank {rank}")
        answer += chunk
    conn.settimeout(None)
    return conn


def _report(conn: socket.socket, message: dict[str, Any]) -> None:
    # poprun may be gone (killed); the instance's exit code still reaches mpirun.
    with contextlib.suppress(OSError):
        conn.sendall((json.dumps(message) + "\n").encode())


def main(argv: Sequence[str] | None = None) -> int:
    """Run this rank's instance of the program in `argv`; returns the exit code to leave with."""
    program = list(sys.argv[1:] if argv is None else argv)
    path = os.environ.pop(_mpi.SOCKET_VARIABLE)
    changes: list[dict[str, str]] = json.loads(os.environ.pop(_mpi.RANK_ENV_VARIABLE))
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    env = {**os.environ, **changes[rank]}
    report = _connect(path, rank, "report")
    streams = [_connect(path, rank, kind) for kind in ("stdout", "stderr")]
    try:
        instance = subprocess.Popen(
            program,
            env=env,
            stdout=streams[0].fileno(),
            stderr=streams[1].fileno(),
            start_new_session=True,  # poprun stops the instance and its children by this group
            preexec_fn=die_with_parent(),  # ends the instance should this process be killed
        )
    except OSError as e:
        _report(report, {"error": str(e), "code": 127})
        return 127
    finally:
        for conn in streams:
            conn.close()
    _report(report, {"pid": instance.pid})

    def pass_on(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(instance.pid, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, pass_on)
    code = instance.wait()
    _report(report, {"exit": code, "at_ns": time.monotonic_ns()})
    report.close()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
