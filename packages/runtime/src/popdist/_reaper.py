"""Stops a poprun's instances, their own children included, should poprun die without stopping them.

    python -m popdist._reaper

Linux's parent-death signal (which poprun arms for each instance) reaches the instance alone; processes
the instance started live on once it has gone. Each instance leads a process group of its own, so poprun
starts this small process beside it, with a pipe as its stdin, and writes there, one a line, each
instance's group as it starts it ("+PGID"), each group that has emptied ("-PGID"), and "exit" once it
has stopped everything itself. Should the pipe close without "exit" (poprun was killed, even with
SIGKILL, which leaves it no chance to clean up), this sends SIGTERM to every group still listed and
SIGKILL to what remains GRACE_S seconds later. It ignores the signals that stop a launch (Ctrl-C reaches
poprun, which stops the instances itself): it ends with the pipe.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import IO

# Seconds the instances' groups get after SIGTERM before SIGKILL.
GRACE_S = 5.0
# The longest line poprun writes here.
_MAX_LINE = 64


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a pid reused by another user's process: not ours
        return False
    return True


def _signal(groups: set[int], sig: int) -> None:
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


def serve(pipe: IO[bytes]) -> int:
    """Follow poprun's lines on `pipe`; stop the listed groups if it closes without "exit". Returns 0."""
    groups: set[int] = set()
    for raw in iter(lambda: pipe.readline(_MAX_LINE), b""):
        line = raw.strip()
        if line == b"exit":
            return 0
        with contextlib.suppress(ValueError):
            pgid = int(line)
            if pgid > 1:
                groups.add(pgid)
            elif pgid < -1:
                groups.discard(-pgid)
    _signal(groups, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(_alive(g) for g in groups):
        time.sleep(0.1)
    _signal(groups, signal.SIGKILL)
    return 0


class Reaper:
    """poprun's end of the reaper process."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self._watched: set[int] = set()

    @classmethod
    def start(cls) -> Reaper | None:
        """Start the reaper (None where it cannot start: poprun runs on without it)."""
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "popdist._reaper"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # out of the terminal's group: Ctrl-C and kills of poprun's group miss it
            )
        except OSError:
            return None
        return cls(proc)

    def _write(self, text: str) -> None:
        assert self._proc.stdin is not None
        with contextlib.suppress(OSError, ValueError):
            self._proc.stdin.write(text.encode() + b"\n")
            self._proc.stdin.flush()

    def watch(self, pgid: int) -> None:
        """Have the reaper stop group `pgid` should poprun die (once per group)."""
        if pgid not in self._watched:
            self._watched.add(pgid)
            self._write(str(pgid))

    def forget_empty(self) -> None:
        """Drop the groups that have no process left, so that a reused pid is never signalled."""
        for pgid in [g for g in self._watched if not _alive(g)]:
            self._watched.discard(pgid)
            self._write(str(-pgid))

    def close(self) -> None:
        """poprun has stopped everything itself: end the reaper without it signalling anything."""
        self._write("exit")
        with contextlib.suppress(OSError):
            assert self._proc.stdin is not None
            self._proc.stdin.close()
        try:
            self._proc.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def main() -> int:
    """Run as poprun's reaper."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    return serve(sys.stdin.buffer)


if __name__ == "__main__":
    sys.exit(main())
