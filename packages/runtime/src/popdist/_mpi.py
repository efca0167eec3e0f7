"""Starting a single-host launch's instances through Open MPI's `mpirun`, so that they are MPI ranks.

Graphcore's PopRun starts its instances through MPI, so programs may use MPI beside PopDist (mpi4py's
`COMM_WORLD` spans the instances, its rank the instance index). When Open MPI's `mpirun` is on PATH,
poprun runs one `mpirun` that starts a rank process (`popdist._rank`) per instance; rank i runs
instance i as its child, with that instance's environment. The instance inherits the rank's MPI
variables, so the MPI library in it is rank i of the job.

poprun keeps the instances' supervision as without MPI. Each rank process connects to poprun at a Unix
socket in a private folder: once to report (the instance's pid, then how it ended, with the time on the
host's monotonic clock), and once for each of the instance's stdout and stderr, which it hands to the
instance, so that poprun tags their lines itself (mpirun's own `--tag-output` tags each chunk it reads,
not each line). poprun then stops instances by their process groups and names the one that failed
first, even where mpirun has already begun stopping the job itself.

On several hosts (each running its own poprun) no MPI is used: the instances of all hosts would have
to be one MPI job, which one mpirun per host cannot make.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

MODES = ("auto", "on", "off")
# Sets --mpi's default.
MODE_VARIABLE = "POPRUN_MPI"
# What poprun tells each rank process: where to connect, and each rank's own variables (a JSON list).
SOCKET_VARIABLE = "POPRUN_RANK_SOCKET"
RANK_ENV_VARIABLE = "POPRUN_RANK_ENV"
# The connections a rank process opens to poprun, each naming its kind in its first line.
KINDS = ("report", "stdout", "stderr")
# Variables that mark a process started by an MPI launcher (Open MPI, PMIx, MPICH's Hydra).
_RANK_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK")
# The exit code passed on for an instance whose rank process ended without saying how the instance did.
LOST_CODE = 1
# Seconds a rank process waits for poprun to take each connection.
CONNECT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Mpirun:
    """Open MPI's mpirun: its path and major version."""

    path: str
    major: int


def find_mpirun() -> tuple[Mpirun | None, str]:
    """Open MPI's mpirun on PATH, or None and why there is none."""
    path = shutil.which("mpirun")
    if path is None:
        return None, "no mpirun on PATH"
    try:
        shown = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"`{path} --version` failed: {e}"
    text = shown.stdout + shown.stderr
    # Other MPIs' mpirun take other options (no --tag-output, --oversubscribe, --bind-to).
    if "Open MPI" not in text and "OpenRTE" not in text:
        return None, f"{path} is not Open MPI's"
    version = re.search(r"(\d+)\.\d+", text)
    return Mpirun(path, int(version.group(1)) if version else 4), ""


def decide(mode: str, said: str, num_hosts: int) -> tuple[Mpirun | None, str]:
    """Whether to start the instances through mpirun, as `mode` asks (`said` where: '--mpi on'): mpirun, or
    None and why not; ValueError where `on` cannot be."""
    if mode == "off":
        return None, said
    reason = ""
    if num_hosts > 1:
        reason = f"a launch over {num_hosts} hosts; poprun uses MPI on one host only"
    elif any(name in os.environ for name in _RANK_VARIABLES):
        reason = "poprun itself runs as an MPI rank"
    found: Mpirun | None = None
    if not reason:
        found, reason = find_mpirun()
    if found is None and mode == "on":
        raise ValueError(f"{said}, but {reason}")
    return found, reason


def command(
    mpirun: Mpirun, ranks: int, program: Sequence[str], quiet: bool, global_args: str | None, local_args: str | None
) -> list[str]:
    """The mpirun command line that starts `ranks` rank processes, each running its instance of `program`."""
    # Instances may outnumber the cores (Open MPI refuses that by default), and they must not be bound to one
    # core each, as Open MPI does for small jobs: each instance's XLA runs threads on every core.
    spread = ["--map-by", ":OVERSUBSCRIBE"] if mpirun.major >= 5 else ["--oversubscribe"]
    line = [mpirun.path, "-np", str(ranks), *spread, "--bind-to", "none"]
    if os.geteuid() == 0:
        line.append("--allow-run-as-root")
    if quiet and mpirun.major < 5:
        # poprun names a failed instance itself; mpirun's explanations would only repeat it. Open MPI 5's
        # mpirun (PRRTE's) has no --quiet and refuses to start with it (exit 213).
        line.append("--quiet")
    for extra in (global_args, local_args):
        if extra:
            line.extend(shlex.split(extra))
    return [*line, sys.executable, "-m", "popdist._rank", *program]


def rank_environments(envs: Sequence[dict[str, str]]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """mpirun's environment (the first instance's) and, for each rank, the variables it changes there."""
    base = envs[0]
    # The launcher gives every instance the same variables, so a rank only changes values. PATH is always
    # given back: mpirun puts its own folder first, which would pick another `python3` than poprun's caller's.
    assert all(env.keys() == base.keys() for env in envs)
    return base, [{k: v for k, v in env.items() if base[k] != v or k == "PATH"} for env in envs]


class Rank:
    """An instance started through mpirun, as its rank process reports it: polled and waited for like a Popen."""

    def __init__(self, index: int) -> None:
        self.index = index
        self._pid: int | None = None
        self._code: int | None = None
        self.ended_ns: int | None = None
        # Set when the instance did not run: why (it could not start, or its rank process vanished).
        self.start_error: str | None = None
        self.lost: str | None = None
        self._ended = threading.Event()

    @property
    def pid(self) -> int | None:
        """The instance's pid (it leads its own process group); None until its rank process reports it."""
        return self._pid

    def poll(self) -> int | None:
        """The instance's exit code (negative: killed by that signal), or None while it runs."""
        return self._code

    def wait(self, timeout: float | None = None) -> int:
        """Wait until the instance has ended; subprocess.TimeoutExpired after `timeout` seconds."""
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"instance {self.index}", timeout or 0.0)
        assert self._code is not None
        return self._code

    def end(self, code: int, at_ns: int, start_error: str | None = None, lost: str | None = None) -> None:
        """Record how the instance ended (the first report counts)."""
        if self._ended.is_set():
            return
        self.ended_ns, self.start_error, self.lost = at_ns, start_error, lost
        self._code = code
        self._ended.set()

    def started(self, pid: int) -> None:
        """Record the instance's pid."""
        self._pid = pid


class Listener:
    """poprun's end of the rank processes' connections: their reports and their instances' output."""

    def __init__(self, count: int, on_stream: Callable[[int, str, IO[bytes]], None]) -> None:
        self.ranks = [Rank(i) for i in range(count)]
        self._on_stream = on_stream
        self._folder = tempfile.mkdtemp(prefix="poprun-")  # only this user may enter it
        self.path = os.path.join(self._folder, "ranks")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._server.bind(self.path)
            self._server.listen(3 * count + 8)
        except OSError:
            self.close()
            raise
        self._reports: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        """Read a connection's first line, acknowledge it and hand the connection on."""
        conn.settimeout(CONNECT_TIMEOUT_S)
        reader = conn.makefile("rb")
        try:
            header = json.loads(reader.readline())
            index, kind = int(header["rank"]), str(header["kind"])
            if not 0 <= index < len(self.ranks) or kind not in KINDS:
                raise ValueError(f"unexpected connection {header!r}")
            conn.settimeout(None)
            conn.sendall(b"ok\n")
        except (OSError, ValueError, KeyError, TypeError):
            reader.close()
            return
        finally:
            conn.close()  # the reader keeps the connection open until it is closed
        if kind == "report":
            self._reports.append(threading.current_thread())
            self._follow_reports(self.ranks[index], reader)
        else:
            self._on_stream(index, kind, reader)

    def _follow_reports(self, rank: Rank, reader: IO[bytes]) -> None:
        with reader, contextlib.suppress(OSError, ValueError):
            for line in reader:
                message = json.loads(line)
                if "pid" in message:
                    rank.started(int(message["pid"]))
                elif "exit" in message:
                    rank.end(int(message["exit"]), int(message["at_ns"]))
                elif "error" in message:
                    rank.end(int(message.get("code", 127)), time.monotonic_ns(), start_error=str(message["error"]))
        rank.end(LOST_CODE, time.monotonic_ns(), lost="ended without a report from its MPI rank process")

    def settle(self, timeout: float) -> None:
        """Wait (at most `timeout` seconds) for the reports of rank processes that have connected."""
        deadline = time.monotonic() + timeout
        for thread in list(self._reports):
            thread.join(max(0.0, deadline - time.monotonic()))

    def abandon(self, why: str, code: int) -> None:
        """End every instance that has not ended with exit code `code`: its rank process will not report."""
        for rank in self.ranks:
            rank.end(code, time.monotonic_ns(), lost=why)

    def close(self) -> None:
        """Stop listening and remove the socket's folder."""
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the thread waiting in accept()
        with contextlib.suppress(OSError):
            self._server.close()
        shutil.rmtree(self._folder, ignore_errors=True)
