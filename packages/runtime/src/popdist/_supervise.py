"""Supervision of a launch while it runs: this host's instances watched, and the other hosts' poprun heard
(through `popdist._wire`), until every instance has succeeded or something failed."""

from __future__ import annotations

import contextlib
import queue
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass

from popdist import _reaper, _wire
from popdist._cli import Launch
from popdist._instances import STOP_GRACE_S, Instance, describe, stop
from popdist._mpijob import MpiJob
from popdist._output import Output

# poprun's exit code when it, rather than an instance, fails: hosts that cannot join, or lose contact.
LAUNCH_FAILED = 1


@dataclass
class Ending:
    """How the launch ended: poprun's exit code and its last line (None: a quiet success)."""

    code: int
    line: str | None = None


class Supervisor:
    """Watches this host's instances and the other hosts' poprun until the launch ends."""

    def __init__(
        self,
        launch: Launch,
        procs: Sequence[Instance],
        link: _wire.Link | None,
        output: Output,
        shown: int | None,
        job: MpiJob | None = None,
        reaper: _reaper.Reaper | None = None,
    ) -> None:
        self.launch, self.procs, self.link, self.output, self.shown = launch, procs, link, output, shown
        self.job, self.reaper = job, reaper
        self.multihost = link is not None
        self.done_hosts: set[int] = set()
        self.host = launch.place.host_index

    def _stopped(self, what: str, code: int) -> Ending:
        """Stop this host's instances after `what` happened; the ending that passes on `code`."""
        stop(self.procs, signal.SIGTERM)
        if self.job is not None:
            self.job.finish()
        self.output.drain(STOP_GRACE_S)
        others = "; stopped the other instances" if self.multihost or len(self.procs) > 1 else ""
        return Ending(code, f"{what}{others}")

    def _local_failure(self, i: int, code: int) -> Ending:
        index = self.launch.first + i
        rank = self.job.ranks[i] if self.job is not None else None
        if rank is not None and rank.start_error is not None:
            what, exit_code = f"cannot start instance {index}: {rank.start_error}", code  # as without MPI
        else:
            how, exit_code = (rank.lost, code) if rank is not None and rank.lost is not None else describe(code)
            what = f"instance {index} on host {self.host} {how}" if self.multihost else f"instance {index} {how}"
        ending = self._stopped(what, exit_code)
        tail = self.output.hidden.get(index) if self.shown not in (None, index) else None
        if tail:
            self.output.say(f"instance {index}'s output was hidden; its last lines:\n" + "".join(tail).rstrip("\n"))
        if self.link is not None:
            report = {"what": what, "code": exit_code}
            if self.host == 0:
                self.link.broadcast({"stop": report})
            else:
                self.link.send(0, {"failed": report})
        return ending

    def _remote(self, host: int, message: _wire.Message | _wire.Lost) -> Ending | None:
        """What a message from `host`'s poprun (checked by `_control`), or its loss, ends, if anything."""
        assert self.link is not None
        report: _wire.Message
        if isinstance(message, _wire.Lost):
            after = f" after {message.silent_s:g} s of silence" if message.silent_s is not None else ""
            report = {"what": f"lost contact with host {host}'s poprun{after}", "code": LAUNCH_FAILED}
        elif "done" in message:
            self.done_hosts.add(host)
            return None
        elif "finish" in message:
            return Ending(0)
        else:
            report = message.get("stop") or message["failed"]
        if self.host == 0:
            self.link.broadcast({"stop": report}, but=host)
        return self._stopped(str(report["what"]), int(report["code"]))

    def run(self) -> Ending:
        """Poll until every instance of the launch has succeeded or something failed."""
        reported = False
        last_forget = time.monotonic()
        while True:
            if self.job is not None:
                self.job.check()
            codes = [p.poll() for p in self.procs]
            if self.reaper is not None:
                # An MPI rank's instance is known once its rank process reports it.
                for p in self.procs:
                    if p.pid is not None:
                        self.reaper.watch(p.pid)
                if time.monotonic() - last_forget > 1.0:
                    self.reaper.forget_empty()
                    last_forget = time.monotonic()
            failed = next(((i, c) for i, c in enumerate(codes) if c is not None and c != 0), None)
            if failed is not None:
                if self.job is not None:
                    stop(self.procs, signal.SIGTERM)
                    first = self.job.first_failure()
                    failed = first, self.job.ranks[first].wait(0)
                return self._local_failure(*failed)
            if not reported and all(c == 0 for c in codes):
                reported = True
                mpirun_code = self.job.finish() if self.job is not None else 0
                self.output.drain(STOP_GRACE_S)
                if mpirun_code != 0:
                    how, code = describe(mpirun_code)
                    return Ending(code, f"every instance exited with code 0, but mpirun {how}")
                if self.link is None:
                    return Ending(0)
                if self.host == 0:
                    self.done_hosts.add(0)
                else:
                    self.link.send(0, {"done": self.host})
            if self.link is not None:
                with contextlib.suppress(queue.Empty):
                    while True:
                        ending = self._remote(*self.link.events.get_nowait())
                        if ending is not None:
                            return ending
                if self.host == 0 and len(self.done_hosts) == self.launch.place.num_hosts:
                    self.link.broadcast({"finish": True})
                    return Ending(0)
            time.sleep(0.05)
