"""This host's instances as processes: what poprun needs of one, and how it stops them and tells how they ended."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Protocol

# Seconds the other instances get to exit after being asked to stop, before they are killed.
STOP_GRACE_S = 5.0


class Instance(Protocol):
    """A running instance: a subprocess.Popen, or an `_mpi.Rank` that mpirun started."""

    @property
    def pid(self) -> int | None:
        """The pid leading the instance's process group (None while not known)."""

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit code."""


def die_with_parent() -> Callable[[], None] | None:
    """For an instance (or mpirun), before it runs: have Linux send it SIGTERM should its parent, poprun (or an
    MPI rank process), die first, even killed.

    Without it an instance outlives a poprun that was killed, and the other hosts would wait for it."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it
    set_parent_death_signal = 1  # PR_SET_PDEATHSIG

    def arm() -> None:
        prctl(set_parent_death_signal, int(signal.SIGTERM))

    return arm


def signal_group(proc: Instance, sig: int) -> None:
    """Send `sig` to the process group that `proc` leads (if it is still there)."""
    if proc.pid is None:  # an MPI rank that has not started its instance: mpirun stops it
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def stop(procs: Sequence[Instance], first: int) -> None:
    """Send signal `first` to the instances still running; kill those still there after STOP_GRACE_S."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        signal_group(p, first)
    deadline = time.monotonic() + STOP_GRACE_S
    for p in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(max(0.0, deadline - time.monotonic()))
    for p in running:
        # Also the instance's own children, which may outlive it.
        signal_group(p, signal.SIGKILL)
        # Bounded: an MPI rank's end is only known from its report.
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(STOP_GRACE_S)


def describe(code: int) -> tuple[str, int]:
    """How an instance ended, and the exit code that poprun passes on."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}", 128 - code
    return f"exited with code {code}", code
