"""The mpirun that starts this host's instances as the ranks of one MPI job, as poprun sees it while it runs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

from popdist import _mpi
from popdist._instances import STOP_GRACE_S, describe, signal_group


class MpiJob:
    """The mpirun that started this host's instances, and poprun's end of its rank processes' connections."""

    def __init__(self, listener: _mpi.Listener, mpirun: subprocess.Popen[bytes]) -> None:
        self.listener, self.mpirun = listener, mpirun
        self.ranks = listener.ranks

    def check(self) -> None:
        """Once mpirun has exited, end the instances its rank processes did not report on."""
        code = self.mpirun.poll()
        if code is None or all(r.poll() is not None for r in self.ranks):
            return
        self.listener.settle(STOP_GRACE_S)  # reports already under way
        how, passed_on = describe(code)
        self.listener.abandon(f"did not run to its end: mpirun {how}", passed_on or _mpi.LOST_CODE)

    def first_failure(self) -> int:
        """Which rank failed first, once every instance has been stopped.

        mpirun stops the job itself when a rank fails, so the others may report being stopped before the
        first failure's report is read: the rank processes' clocks (the host's monotonic clock) tell."""
        self.listener.settle(STOP_GRACE_S)
        failed = [r for r in self.ranks if r.poll() not in (None, 0)]
        # A program that cannot start fails the same way in every instance: name the first.
        not_started = [r.index for r in failed if r.start_error is not None]
        if not_started:
            return min(not_started)
        return min(failed, key=lambda r: (r.ended_ns or 0, r.index)).index

    def finish(self) -> int:
        """Wait for mpirun to exit, stopping it after STOP_GRACE_S; its exit code."""
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None:
                signal_group(self.mpirun, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.mpirun.wait(STOP_GRACE_S)
                break
        self.check()
        # An instance whose rank process was killed (by mpirun, stopping the job) got SIGTERM from Linux only.
        for rank in self.ranks:
            if rank.lost is not None and rank.pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(rank.pid, signal.SIGKILL)
        return self.mpirun.wait()

    def close(self) -> None:
        """Remove the rank processes' socket."""
        self.listener.close()
