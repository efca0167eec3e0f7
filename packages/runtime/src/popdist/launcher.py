"""`poprun`: start the instances of a program, on one host or on several, as Graphcore's PopRun does.

    poprun [options] program [args]

Each instance is a subprocess running `program args` with the environment `popdist` reads
(`popdist._env`): its index and the instance count, the replicas in all and on it, the global index of
its first replica, and the address where instance 0 runs the `jax.distributed` coordinator. With CPU
devices each instance offers its local replicas as CPU devices (JAX_PLATFORMS=cpu, JAX_NUM_CPU_DEVICES);
with GPUs, CUDA_VISIBLE_DEVICES gives each instance its own.

Across hosts one poprun runs on each host (started by SLURM, by Open MPI's mpirun, or by hand) and
starts that host's share of the instances, which are divided evenly among the hosts in host order;
instance indices, replica offsets and JAX's process ids are global. `popdist._hosts` finds this host's
place (`--host`/`--hostfile`, `--num-hosts`, `--host-index`, `--coordinator-address`, or the cluster's
variables) and `popdist._control` links the hosts' poprun so that they start and stop together.

On one host, when Open MPI's `mpirun` is on PATH, the instances are started through it and are the
ranks of one MPI job, as PopRun's are (`popdist._mpi`); otherwise, or with `--mpi off`, they are
started directly, and poprun says so in one line.

Every line an instance writes is prefixed `[1,N]<stdout>:` or `[1,N]<stderr>:` (N its index), the
tags of Open MPI's `--tag-output` that PopRun's output carries. When one instance fails, the others
(on every host) are stopped and poprun exits with that instance's exit code, naming it; Ctrl-C (or
SIGTERM) stops them all.
"""

# This module is long because it holds poprun's parser, output relay, supervision and both start paths; the
# layout issue (40) splits it into those parts.

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import json
import os
import queue
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import IO, Protocol

from popdist import _control, _env, _hosts, _mpi, _reaper, _wire

# PopRun's options for IPU fabrics: accepted so that command lines written for PopRun run, and without
# effect here (no IPU partition is involved).
NO_EFFECT_OPTIONS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--num-ilds",), "the number of IPU-Link domains"),
    (("--vipu-server-host",), "the V-IPU server's host"),
    (("--vipu-server-port",), "the V-IPU server's port"),
    (("--vipu-server-timeout",), "the V-IPU server's request timeout"),
    (("--vipu-partition",), "the V-IPU partition to create or use"),
    (("--vipu-partition-attempts",), "attempts to bind the partition"),
    (("--vipu-cluster",), "the V-IPU cluster of a new partition"),
    (("--vipu-allocation",), "the V-IPU allocation of a new partition"),
    (("--update-partition",), "whether to update the partition"),
    (("--reset-partition",), "whether to reset the partition"),
    (("--remove-partition",), "whether to remove the partition afterwards"),
    (("--executable-cache-path",), "a Poplar executable cache"),
    (("--numa-aware",), "NUMA binding of the instances"),
    (("--offline-mode",), "running without IPUs"),
)
# PopRun's options for mpirun: passed to it when poprun starts the instances through it, else without effect.
MPI_OPTIONS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--mpi-global-args",), "options for mpirun"),
    (("--mpi-local-args",), "more options for mpirun (PopRun's per-instance options)"),
)

# Seconds the other instances get to exit after being asked to stop, before they are killed.
STOP_GRACE_S = 5.0
# Lines of a hidden instance's output shown if it fails.
HIDDEN_TAIL_LINES = 20
# poprun's exit code when it, rather than an instance, fails: hosts that cannot join, or lose contact.
LAUNCH_FAILED = 1


class _TerminatedError(Exception):
    """Raised in the main thread by SIGTERM, to stop the instances as Ctrl-C does."""


class _Instance(Protocol):
    """A running instance: a subprocess.Popen, or an `_mpi.Rank` that mpirun started."""

    @property
    def pid(self) -> int | None:
        """The pid leading the instance's process group (None while not known)."""

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit code."""


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _index(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _yes_no(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("yes", "true", "on", "1"):
        return True
    if lowered in ("no", "false", "off", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected yes or no, got {text!r}")


def _dest(flags: tuple[str, ...]) -> str:
    return flags[-1].lstrip("-").replace("-", "_")


def build_parser() -> argparse.ArgumentParser:
    """poprun's command line."""
    parser = argparse.ArgumentParser(
        prog="poprun",
        usage="poprun [options] program [args]",
        description="Run a popxl program as several instances (processes) on this host, as Graphcore's PopRun "
        "does; the program reads its place with popdist and joins the others with popdist.init().",
        epilog="Put `--` before the program if its name starts with '-'.",
    )
    parser.add_argument(
        "--num-instances", type=_positive, default=None, help="the number of instances (default: one per host)"
    )
    parser.add_argument(
        "--num-replicas",
        type=_positive,
        default=None,
        help="the total number of replicas, divided evenly among the instances (default: one per instance)",
    )
    parser.add_argument(
        "--ipus-per-replica",
        type=_positive,
        default=1,
        help="the IPUs per replica (default 1): passed on to popdist; each replica runs on one device here",
    )
    parser.add_argument(
        "--only-output-from-instance",
        type=_index,
        default=None,
        metavar="N",
        help="show only instance N's output (a failing instance's last lines are still shown)",
    )
    parser.add_argument(
        "--print-topology",
        type=_yes_no,
        default=False,
        metavar="yes|no",
        help="print which instance runs which replicas",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="say what poprun does (-vv: also each instance's environment)",
    )
    ours = parser.add_argument_group("options of this poprun (not PopRun's)")
    ours.add_argument(
        "--devices",
        choices=("auto", "cpu", "gpu"),
        default="auto",
        help="run the replicas on CPU devices, or one GPU each; auto (the default) picks GPUs when JAX_PLATFORMS "
        "does not say cpu and there are enough of them",
    )
    ours.add_argument(
        "--init-timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help=f"how long popdist.init() waits for the coordinator and the other instances (sets {_env.INIT_TIMEOUT}; "
        f"default: {_env.INIT_TIMEOUT} if set, else {_env.DEFAULT_INIT_TIMEOUT:g})",
    )
    ours.add_argument(
        "--mpi",
        choices=_mpi.MODES,
        default=None,
        help="start the instances through Open MPI's mpirun, so that they are the ranks of one MPI job: on, off, "
        f"or auto (the default; {_mpi.MODE_VARIABLE} sets another): when mpirun is on PATH and the launch is on "
        "one host",
    )
    hosts = parser.add_argument_group(
        "hosts: run one poprun on each host; each starts its share of the instances (PopRun's -H and --hostfile, "
        "and this poprun's own options); unset, they come from SLURM or Open MPI when poprun runs under them"
    )
    listed = hosts.add_mutually_exclusive_group()
    listed.add_argument(
        "-H",
        "--host",
        metavar="LIST",
        default=None,
        help="the hosts, host 0 first: a comma-separated list, with ranges as in host[0-2,4]; the instances are "
        "divided evenly among them, and host 0's poprun listens at the first one",
    )
    listed.add_argument("--hostfile", metavar="FILE", default=None, help="a file listing the hosts, one a line")
    hosts.add_argument("--num-hosts", type=_positive, default=None, metavar="N", help="the number of hosts")
    hosts.add_argument(
        "--host-index",
        type=_index,
        default=None,
        metavar="I",
        help="which host this is (default: the cluster's task rank, or this machine's place in --host)",
    )
    hosts.add_argument(
        "--coordinator-address",
        default=None,
        metavar="HOST:PORT",
        help="where host 0's poprun listens for the others (default: the first host of --host at port "
        f"{_hosts.PORT_VARIABLE} or {_hosts.DEFAULT_PORT}; under SLURM or Open MPI, where JAX would put its "
        "coordinator)",
    )
    hosts.add_argument(
        "--new-secret",
        action="store_true",
        help=f"print a fresh secret for {_control.SECRET_VARIABLE} and exit: every host's poprun of a launch must be "
        "given the same one, with which they prove to each other that they belong to the launch",
    )
    hosts.add_argument(
        "--cluster",
        choices=_hosts.CLUSTERS,
        default="auto",
        help="the cluster environment to read the hosts from (default auto: Open MPI or SLURM when present)",
    )
    mpi = parser.add_argument_group("PopRun's MPI options: passed to mpirun when the instances start through it")
    for flags, what in MPI_OPTIONS:
        mpi.add_argument(*flags, dest=_dest(flags), default=None, metavar="ARGS", help=what)
    ignored = parser.add_argument_group("PopRun's IPU options: accepted, no effect here")
    for flags, what in NO_EFFECT_OPTIONS:
        ignored.add_argument(*flags, dest=_dest(flags), default=None, metavar="ARG", help=what)
    parser.add_argument("program", nargs=argparse.REMAINDER, help="the program and its arguments")
    return parser


def _gpu_ids() -> list[str]:
    """The GPUs this host offers: CUDA_VISIBLE_DEVICES's entries if it is set, else nvidia-smi's list."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(ln for ln in listing.stdout.splitlines() if ln.startswith("GPU "))]


def _choose_devices(asked: str, replicas: int) -> tuple[str, list[str]]:
    """'cpu' or 'gpu', and the GPU ids to share out."""
    if asked == "cpu":
        return "cpu", []
    platforms = [p.strip().lower() for p in os.environ.get("JAX_PLATFORMS", "").split(",") if p.strip()]
    if asked == "auto" and platforms and platforms[0] == "cpu":
        return "cpu", []
    gpus = _gpu_ids()
    if len(gpus) >= replicas:
        return "gpu", gpus
    if asked == "gpu":
        raise SystemExit(
            f"poprun: --devices gpu needs {replicas} GPUs (one per replica), but this host offers {len(gpus)}"
        )
    return "cpu", []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class _Launch:
    """The whole launch, and this host's share: instances `first`..`first + per_host - 1`."""

    num_instances: int
    num_replicas: int
    ipus_per_replica: int
    place: _hosts.HostPlace
    # The secret the hosts' poprun prove to each other (None on one host); never shown.
    secret: bytes | None = field(default=None, repr=False)

    @property
    def local(self) -> int:
        """Replicas per instance."""
        return self.num_replicas // self.num_instances

    @property
    def per_host(self) -> int:
        """Instances per host."""
        return self.num_instances // self.place.num_hosts

    @property
    def first(self) -> int:
        """The global index of this host's first instance."""
        return self.place.host_index * self.per_host

    def agreement(self) -> _wire.Message:
        """What every host's poprun must have been given alike."""
        return {
            "num_hosts": self.place.num_hosts,
            "num_instances": self.num_instances,
            "num_replicas": self.num_replicas,
            "ipus_per_replica": self.ipus_per_replica,
        }


def _instance_env(
    args: argparse.Namespace, launch: _Launch, index: int, devices: str, gpus: list[str], address: str
) -> dict[str, str]:
    # The launch's secret is poprun's alone: the program has no use for it, and might log its environment.
    env = {k: v for k, v in os.environ.items() if k not in _env.ALL and k != _control.SECRET_VARIABLE}
    local, here = launch.local, index - launch.first
    env.update(
        {
            _env.NUM_INSTANCES: str(launch.num_instances),
            _env.INSTANCE_INDEX: str(index),
            _env.LOCAL_INSTANCE_INDEX: str(here),
            _env.NUM_TOTAL_REPLICAS: str(launch.num_replicas),
            _env.NUM_LOCAL_REPLICAS: str(local),
            _env.REPLICA_INDEX_OFFSET: str(index * local),
            _env.NUM_IPUS_PER_REPLICA: str(launch.ipus_per_replica),
            _env.COORDINATOR_ADDRESS: address,
            _env.DEVICES: devices,
            # Every device the instance sees is its own. Naming them also keeps JAX from reading a
            # cluster's variables (SLURM_LOCALID, ...), which describe this host's poprun, not the instance.
            "JAX_LOCAL_DEVICE_IDS": ",".join(str(d) for d in range(local)),
        }
    )
    timeout = args.init_timeout if args.init_timeout is not None else os.environ.get(_env.INIT_TIMEOUT)
    if timeout is not None:
        env[_env.INIT_TIMEOUT] = str(timeout)
    if devices == "gpu":
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[here * local : (here + 1) * local])
    else:
        env["JAX_PLATFORMS"] = "cpu"
        env["JAX_NUM_CPU_DEVICES"] = str(local)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class _Output:
    """Copies the instances' lines to poprun's stdout and stderr, tagged; keeps hidden instances' last lines."""

    def __init__(self, shown: int | None, verbose: int = 0) -> None:
        self.shown = shown
        self.verbose = verbose
        self.lock = threading.Lock()
        self.hidden: dict[int, collections.deque[str]] = {}
        self.threads: list[threading.Thread] = []

    def follow(self, index: int, stream_name: str, pipe: IO[bytes], sink: IO[str]) -> None:
        visible = self.shown is None or self.shown == index
        tail = self.hidden.setdefault(index, collections.deque(maxlen=HIDDEN_TAIL_LINES))
        prefix = f"[1,{index}]<{stream_name}>:"
        thread = threading.Thread(target=self._copy, args=(pipe, prefix, sink, visible, tail), daemon=True)
        thread.start()
        self.threads.append(thread)

    def _copy(self, pipe: IO[bytes], prefix: str, sink: IO[str], visible: bool, tail: collections.deque[str]) -> None:
        with pipe:
            for raw in iter(pipe.readline, b""):
                line = prefix + raw.decode("utf-8", errors="replace").rstrip("\r\n") + "\n"
                if visible:
                    with self.lock:
                        sink.write(line)
                        sink.flush()
                else:
                    tail.append(line)

    def relay(self, pipe: IO[bytes], sink: IO[str]) -> None:
        """Copy a launcher's own lines (mpirun's) as they are, whichever instance is shown."""
        thread = threading.Thread(target=self._copy, args=(pipe, "", sink, True, collections.deque()), daemon=True)
        thread.start()
        self.threads.append(thread)

    def drain(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def say(self, message: str, verbose: bool = False) -> None:
        """Write `message` as poprun's own line on stderr (when `verbose`, only with -v)."""
        if verbose and not self.verbose:
            return
        with self.lock:
            sys.stdout.flush()
            sys.stderr.write(f"poprun: {message}\n")
            sys.stderr.flush()


def _die_with_parent() -> Callable[[], None] | None:
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


def _signal_group(proc: _Instance, sig: int) -> None:
    if proc.pid is None:  # an MPI rank that has not started its instance: mpirun stops it
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _stop(procs: Sequence[_Instance], first: int) -> None:
    """Send signal `first` to the instances still running; kill those still there after STOP_GRACE_S."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        _signal_group(p, first)
    deadline = time.monotonic() + STOP_GRACE_S
    for p in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(max(0.0, deadline - time.monotonic()))
    for p in running:
        # Also the instance's own children, which may outlive it.
        _signal_group(p, signal.SIGKILL)
        # Bounded: an MPI rank's end is only known from its report.
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(STOP_GRACE_S)


def _describe(code: int) -> tuple[str, int]:
    """How an instance ended, and the exit code that poprun passes on."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}", 128 - code
    return f"exited with code {code}", code


def _topology(launch: _Launch) -> str:
    local = launch.local
    rows: list[tuple[str, list[str]]] = []
    if launch.place.num_hosts > 1:
        rows.append(("hosts", [str(i // launch.per_host) for i in range(launch.num_instances)]))
    rows.append(("instances", [str(i) for i in range(launch.num_instances)]))
    rows.append(
        (
            "replicas",
            [
                f"{i * local}" if local == 1 else f"{i * local}-{(i + 1) * local - 1}"
                for i in range(launch.num_instances)
            ],
        )
    )
    widths = [max(len(cells[i]) for _, cells in rows) for i in range(launch.num_instances)]
    return "\n".join(
        f"{name:<9} | " + " | ".join(c.center(w) for c, w in zip(cells, widths)) + " |" for name, cells in rows
    )


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _TerminatedError()


class _MpiJob:
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
        how, passed_on = _describe(code)
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
                _signal_group(self.mpirun, sig)
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


@dataclass
class _Ending:
    """How the launch ended: poprun's exit code and its last line (None: a quiet success)."""

    code: int
    line: str | None = None


class _Supervisor:
    """Watches this host's instances and the other hosts' poprun until the launch ends."""

    def __init__(
        self,
        launch: _Launch,
        procs: Sequence[_Instance],
        link: _wire.Link | None,
        output: _Output,
        shown: int | None,
        job: _MpiJob | None = None,
        reaper: _reaper.Reaper | None = None,
    ) -> None:
        self.launch, self.procs, self.link, self.output, self.shown = launch, procs, link, output, shown
        self.job, self.reaper = job, reaper
        self.multihost = link is not None
        self.done_hosts: set[int] = set()
        self.host = launch.place.host_index

    def _stopped(self, what: str, code: int) -> _Ending:
        """Stop this host's instances after `what` happened; the ending that passes on `code`."""
        _stop(self.procs, signal.SIGTERM)
        if self.job is not None:
            self.job.finish()
        self.output.drain(STOP_GRACE_S)
        others = "; stopped the other instances" if self.multihost or len(self.procs) > 1 else ""
        return _Ending(code, f"{what}{others}")

    def _local_failure(self, i: int, code: int) -> _Ending:
        index = self.launch.first + i
        rank = self.job.ranks[i] if self.job is not None else None
        if rank is not None and rank.start_error is not None:
            what, exit_code = f"cannot start instance {index}: {rank.start_error}", code  # as without MPI
        else:
            how, exit_code = (rank.lost, code) if rank is not None and rank.lost is not None else _describe(code)
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

    def _remote(self, host: int, message: _wire.Message | _wire.Lost) -> _Ending | None:
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
            return _Ending(0)
        else:
            report = message.get("stop") or message["failed"]
        if self.host == 0:
            self.link.broadcast({"stop": report}, but=host)
        return self._stopped(str(report["what"]), int(report["code"]))

    def run(self) -> _Ending:
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
                    _stop(self.procs, signal.SIGTERM)
                    first = self.job.first_failure()
                    failed = first, self.job.ranks[first].wait(0)
                return self._local_failure(*failed)
            if not reported and all(c == 0 for c in codes):
                reported = True
                mpirun_code = self.job.finish() if self.job is not None else 0
                self.output.drain(STOP_GRACE_S)
                if mpirun_code != 0:
                    how, code = _describe(mpirun_code)
                    return _Ending(code, f"every instance exited with code 0, but mpirun {how}")
                if self.link is None:
                    return _Ending(0)
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
                    return _Ending(0)
            time.sleep(0.05)


def _connect(launch: _Launch, timeout: float, output: _Output) -> tuple[_wire.Link | None, str]:
    """Join the other hosts' poprun (if any); JAX's coordinator address for the instances."""
    place = launch.place
    if place.num_hosts == 1:
        return None, f"127.0.0.1:{_free_port()}"
    assert place.address is not None
    assert launch.secret is not None
    if place.host_index == 0:
        jax_address = _hosts.join_address(place.coordinator_host, _free_port())
        host, port = _hosts.split_address(place.address)
        output.say(f"host 0 of {place.num_hosts}: waiting for the other hosts' poprun at {place.address}", verbose=True)
        link = _control.gather(
            host,
            port,
            place.num_hosts,
            launch.agreement(),
            jax_address,
            timeout,
            launch.secret,
            lambda note: output.say(note, verbose=True),
        )
        return link, jax_address
    output.say(
        f"host {place.host_index} of {place.num_hosts}: joining host 0's poprun at {place.address}", verbose=True
    )
    return _control.join(place.address, place.host_index, launch.agreement(), timeout, launch.secret)


@dataclass(frozen=True)
class _MpiChoice:
    """Whether the instances start through mpirun: `mpirun`, or None and `reason`."""

    mpirun: _mpi.Mpirun | None
    reason: str


def _choose_mpi(parser: argparse.ArgumentParser, asked: str | None, num_hosts: int) -> _MpiChoice:
    """--mpi, else POPRUN_MPI, else auto, for this launch; a usage error where `on` cannot be."""
    said = f"--mpi {asked}"
    if asked is None:
        variable = os.environ.get(_mpi.MODE_VARIABLE, "").strip().lower()
        if variable and variable not in _mpi.MODES:
            parser.error(f"{_mpi.MODE_VARIABLE}={variable!r} is none of {', '.join(_mpi.MODES)}")
        asked = variable or "auto"
        said = f"{_mpi.MODE_VARIABLE}={asked}"
    try:
        return _MpiChoice(*_mpi.decide(asked, said, num_hosts))
    except ValueError as e:
        parser.error(str(e))


def _parse(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> tuple[argparse.Namespace, list[str], _Launch, _MpiChoice]:
    """The options, the program, the launch and whether it uses MPI; exits with a usage error for a bad command
    line."""
    args = parser.parse_args(argv)
    if args.new_secret:
        print(_control.new_secret())
        raise SystemExit(0)
    program: list[str] = list(args.program)
    if program and program[0] == "--":
        program = program[1:]
    if not program:
        parser.error("no program given (usage: poprun [options] program [args])")
    try:
        listed = _hosts.expand_hosts(args.host) if args.host is not None else None
        if args.hostfile is not None:
            listed = _hosts.read_hostfile(args.hostfile)
        place = _hosts.resolve(listed, args.num_hosts, args.host_index, args.coordinator_address, args.cluster)
        if args.init_timeout is None:
            _env.read_timeout()  # a bad POPDIST_INIT_TIMEOUT is a usage error here, not in every instance
        secret = _control.read_secret() if place.num_hosts > 1 else None
    except ValueError as e:
        parser.error(str(e))
    if args.num_instances is None:
        args.num_instances = place.num_hosts
    if args.num_replicas is None:
        args.num_replicas = args.num_instances
    if args.num_replicas % args.num_instances:
        parser.error(f"--num-replicas {args.num_replicas} is not a multiple of --num-instances {args.num_instances}")
    if args.only_output_from_instance is not None and args.only_output_from_instance >= args.num_instances:
        parser.error(f"--only-output-from-instance {args.only_output_from_instance} names no instance")
    if args.num_instances % place.num_hosts:
        parser.error(
            f"--num-instances {args.num_instances} cannot be divided evenly among {place.num_hosts} hosts "
            f"(from {place.source})"
        )
    mpi = _choose_mpi(parser, args.mpi, place.num_hosts)
    if place.num_hosts > 1 and secret is None:
        parser.error(
            f"a launch over {place.num_hosts} hosts needs a secret that its hosts share: set "
            f"{_control.SECRET_VARIABLE} to the same value for every host's poprun (`export "
            f"{_control.SECRET_VARIABLE}=$(poprun --new-secret)` where they are started from)"
        )
    launch = _Launch(args.num_instances, args.num_replicas, args.ipus_per_replica, place, secret)
    return args, program, launch, mpi


def _start_directly(
    program: list[str],
    envs: dict[int, dict[str, str]],
    output: _Output,
    procs: list[_Instance],
    reaper: _reaper.Reaper | None = None,
) -> tuple[int, OSError] | None:
    """Start each instance as poprun's own subprocess, into `procs`; the instance that cannot start, if any."""
    arm = _die_with_parent()
    for index, env in envs.items():
        try:
            proc = subprocess.Popen(
                program,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=arm,  # only calls prctl, looked up before the fork
            )
        except OSError as e:
            return index, e
        procs.append(proc)
        if reaper is not None:
            reaper.watch(proc.pid)
        assert proc.stdout is not None and proc.stderr is not None
        output.follow(index, "stdout", proc.stdout, sys.stdout)
        output.follow(index, "stderr", proc.stderr, sys.stderr)
    return None


def _start_through_mpirun(
    args: argparse.Namespace, mpirun: _mpi.Mpirun, program: list[str], envs: dict[int, dict[str, str]], output: _Output
) -> _MpiJob:
    """Start one mpirun whose ranks run the instances (OSError if it cannot start)."""
    first = min(envs)
    sinks = {"stdout": sys.stdout, "stderr": sys.stderr}
    listener = _mpi.Listener(len(envs), lambda i, kind, pipe: output.follow(first + i, kind, pipe, sinks[kind]))
    base, changes = _mpi.rank_environments([envs[i] for i in sorted(envs)])
    env = {**base, _mpi.SOCKET_VARIABLE: listener.path, _mpi.RANK_ENV_VARIABLE: json.dumps(changes)}
    line = _mpi.command(mpirun, len(envs), program, not args.verbose, args.mpi_global_args, args.mpi_local_args)
    output.say(f"starting the instances through mpirun: {shlex.join(line)}", verbose=True)
    try:
        proc = subprocess.Popen(
            line,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # Ctrl-C reaches poprun alone, which stops the instances as without MPI
            preexec_fn=_die_with_parent(),  # mpirun stops the job should poprun be killed
        )
    except OSError:
        listener.close()
        raise
    assert proc.stdout is not None and proc.stderr is not None
    output.relay(proc.stdout, sys.stdout)
    output.relay(proc.stderr, sys.stderr)
    return _MpiJob(listener, proc)


def main(argv: Sequence[str] | None = None) -> int:
    """Run poprun with `argv` (default: the command line); returns the exit code."""
    args, program, launch, mpi = _parse(build_parser(), argv)
    place = launch.place
    devices, gpus = _choose_devices(args.devices, launch.per_host * launch.local)
    output = _Output(args.only_output_from_instance, args.verbose)
    output.say(
        f"{launch.num_instances} instance(s) on {place.num_hosts} host(s) (this is host {place.host_index}, from "
        f"{place.source}), {launch.num_replicas} replica(s), {launch.local} per instance, on {devices.upper()} devices",
        verbose=True,
    )
    unused = NO_EFFECT_OPTIONS if mpi.mpirun is not None else NO_EFFECT_OPTIONS + MPI_OPTIONS
    given = [flags[-1] for flags, _ in unused if getattr(args, _dest(flags))]
    if given:
        output.say(f"without effect here: {', '.join(given)}", verbose=True)
    if args.print_topology:
        output.say("topology\n" + _topology(launch))
    timeout = args.init_timeout if args.init_timeout is not None else _env.read_timeout()
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main_thread else None
    procs: list[_Instance] = []
    link: _wire.Link | None = None
    job: _MpiJob | None = None
    reaper: _reaper.Reaper | None = None
    try:
        try:
            link, jax_address = _connect(launch, timeout, output)
        except (TimeoutError, _control.LaunchError, OSError) as e:
            knob = "--init-timeout or " + _env.INIT_TIMEOUT if isinstance(e, TimeoutError) else None
            output.say(f"host {place.host_index}: {e}" + (f" ({knob})" if knob else ""))
            return LAUNCH_FAILED
        output.say(f"JAX's coordinator: {jax_address}", verbose=True)
        envs = {
            index: _instance_env(args, launch, index, devices, gpus, jax_address)
            for index in range(launch.first, launch.first + launch.per_host)
        }
        if args.verbose > 1:
            for index, env in envs.items():
                shown = " ".join(
                    f"{k}={env[k]}"
                    for k in (*_env.ALL, "CUDA_VISIBLE_DEVICES", "JAX_PLATFORMS", "JAX_NUM_CPU_DEVICES")
                    if k in env
                )
                output.say(f"instance {index}: {shown} {' '.join(program)}")
        # Stops the instances' own children should poprun be killed (Linux's parent-death signal reaches the
        # instances only).
        reaper = _reaper.Reaper.start()
        if mpi.mpirun is None:
            output.say(f"starting the instances without MPI ({mpi.reason}): they are not MPI ranks")
            failed = _start_directly(program, envs, output, procs, reaper)
        else:
            try:
                job = _start_through_mpirun(args, mpi.mpirun, program, envs, output)
            except OSError as e:
                output.say(f"cannot start mpirun: {e}")
                return 127
            procs.extend(job.ranks)
            if reaper is not None:
                reaper.watch(job.mpirun.pid)
            failed = None
        if failed is not None:
            index, error = failed
            output.say(f"cannot start instance {index}: {error}")
            _stop(procs, signal.SIGTERM)
            if link is not None:
                report = {"what": f"instance {index} on host {place.host_index} could not start", "code": 127}
                link.broadcast({"stop" if place.host_index == 0 else "failed": report})
            return 127
        ending = _Supervisor(launch, procs, link, output, args.only_output_from_instance, job, reaper).run()
        if ending.line is not None:
            output.say(ending.line)
        elif ending.code == 0:
            output.say("all instances exited with code 0", verbose=True)
        return ending.code
    except (KeyboardInterrupt, _TerminatedError) as e:
        interrupted = isinstance(e, KeyboardInterrupt)
        how, code = ("interrupted", 130) if interrupted else ("terminated", 143)
        output.say(f"{how}; stopping the instances")
        if link is not None:
            report = {"what": f"host {place.host_index}'s poprun was {how}", "code": code}
            link.broadcast({"stop" if place.host_index == 0 else "failed": report})
        _stop(procs, signal.SIGINT if interrupted else signal.SIGTERM)
        if job is not None:
            job.finish()
        output.drain(STOP_GRACE_S)
        return code
    finally:
        if job is not None:
            job.close()
        if link is not None:
            link.close()
        if reaper is not None:
            reaper.close()
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
