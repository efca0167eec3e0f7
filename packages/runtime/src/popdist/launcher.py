"""`poprun`: start the instances of a program on this host, as Graphcore's PopRun does over MPI.

    poprun [options] program [args]

Each instance is a subprocess running `program args` with the environment `popdist` reads
(`popdist._env`): its index and the instance count, the replicas in all and on it, the global index of
its first replica, and the address of a free loopback port where instance 0 runs the
`jax.distributed` coordinator. With CPU devices each instance offers its local replicas as CPU devices
(JAX_PLATFORMS=cpu, JAX_NUM_CPU_DEVICES); with GPUs, CUDA_VISIBLE_DEVICES gives each instance its own.

Every line an instance writes is prefixed `[1,N]<stdout>:` or `[1,N]<stderr>:` (N its index), the
tags of Open MPI's `--tag-output` that PopRun's output carries. When one instance fails, the others are
stopped and poprun exits with that instance's exit code, naming it; Ctrl-C (or SIGTERM) stops them all.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import IO

from popdist import _env

# PopRun's options for IPU fabrics, hosts and MPI: accepted so that command lines written for PopRun run,
# and without effect here (every instance runs on this host and no partition or MPI is involved).
NO_EFFECT_OPTIONS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("-H", "--host"), "hosts on which to start instances"),
    (("--hostfile",), "a file listing the hosts"),
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
    (("--mpi-global-args",), "options for mpirun"),
    (("--mpi-local-args",), "per-instance options for mpirun"),
    (("--numa-aware",), "NUMA binding of the instances"),
    (("--offline-mode",), "running without IPUs"),
)

# Seconds the other instances get to exit after being asked to stop, before they are killed.
STOP_GRACE_S = 5.0
# Lines of a hidden instance's output shown if it fails.
HIDDEN_TAIL_LINES = 20


class _TerminatedError(Exception):
    """Raised in the main thread by SIGTERM, to stop the instances as Ctrl-C does."""


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


def build_parser() -> argparse.ArgumentParser:
    """poprun's command line."""
    parser = argparse.ArgumentParser(
        prog="poprun",
        usage="poprun [options] program [args]",
        description="Run a popxl program as several instances (processes) on this host, as Graphcore's PopRun "
        "does; the program reads its place with popdist and joins the others with popdist.init().",
        epilog="Put `--` before the program if its name starts with '-'.",
    )
    parser.add_argument("--num-instances", type=_positive, default=1, help="the number of instances (default 1)")
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
    ignored = parser.add_argument_group("PopRun's IPU, host and MPI options: accepted, no effect here")
    for flags, what in NO_EFFECT_OPTIONS:
        dest = flags[-1].lstrip("-").replace("-", "_")
        ignored.add_argument(*flags, dest=dest, default=None, metavar="ARG", help=what)
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


def _instance_env(
    args: argparse.Namespace, index: int, local: int, devices: str, gpus: list[str], address: str
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _env.ALL}
    env.update(
        {
            _env.NUM_INSTANCES: str(args.num_instances),
            _env.INSTANCE_INDEX: str(index),
            _env.LOCAL_INSTANCE_INDEX: str(index),
            _env.NUM_TOTAL_REPLICAS: str(args.num_replicas),
            _env.NUM_LOCAL_REPLICAS: str(local),
            _env.REPLICA_INDEX_OFFSET: str(index * local),
            _env.NUM_IPUS_PER_REPLICA: str(args.ipus_per_replica),
            _env.COORDINATOR_ADDRESS: address,
            _env.DEVICES: devices,
        }
    )
    timeout = args.init_timeout if args.init_timeout is not None else os.environ.get(_env.INIT_TIMEOUT)
    if timeout is not None:
        env[_env.INIT_TIMEOUT] = str(timeout)
    if devices == "gpu":
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[index * local : (index + 1) * local])
    else:
        env["JAX_PLATFORMS"] = "cpu"
        env["JAX_NUM_CPU_DEVICES"] = str(local)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class _Output:
    """Copies the instances' lines to poprun's stdout and stderr, tagged; keeps hidden instances' last lines."""

    def __init__(self, shown: int | None) -> None:
        self.shown = shown
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

    def drain(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def say(self, message: str) -> None:
        with self.lock:
            sys.stdout.flush()
            sys.stderr.write(f"poprun: {message}\n")
            sys.stderr.flush()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _stop(procs: Sequence[subprocess.Popen[bytes]], first: int) -> None:
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
        p.wait()


def _describe(code: int) -> tuple[str, int]:
    """How an instance ended, and the exit code that poprun passes on."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}", 128 - code
    return f"exited with code {code}", code


def _topology(num_instances: int, local: int) -> str:
    cells = [
        (str(i), f"{i * local}" if local == 1 else f"{i * local}-{(i + 1) * local - 1}") for i in range(num_instances)
    ]
    widths = [max(len(a), len(b)) for a, b in cells]
    row1 = " | ".join(a.center(w) for (a, _), w in zip(cells, widths))
    row2 = " | ".join(b.center(w) for (_, b), w in zip(cells, widths))
    return f"instances | {row1} |\nreplicas  | {row2} |"


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _TerminatedError()


def main(argv: Sequence[str] | None = None) -> int:
    """Run poprun with `argv` (default: the command line); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    program: list[str] = list(args.program)
    if program and program[0] == "--":
        program = program[1:]
    if not program:
        parser.error("no program given (usage: poprun [options] program [args])")
    if args.num_replicas is None:
        args.num_replicas = args.num_instances
    if args.num_replicas % args.num_instances:
        parser.error(f"--num-replicas {args.num_replicas} is not a multiple of --num-instances {args.num_instances}")
    if args.only_output_from_instance is not None and args.only_output_from_instance >= args.num_instances:
        parser.error(f"--only-output-from-instance {args.only_output_from_instance} names no instance")
    local = args.num_replicas // args.num_instances
    devices, gpus = _choose_devices(args.devices, args.num_replicas)
    address = f"127.0.0.1:{_free_port()}"
    output = _Output(args.only_output_from_instance)
    if args.verbose:
        output.say(
            f"{args.num_instances} instance(s) on this host, {args.num_replicas} replica(s), {local} per instance, "
            f"on {devices.upper()} devices; coordinator {address}"
        )
        given = [flags[-1] for flags, _ in NO_EFFECT_OPTIONS if getattr(args, flags[-1].lstrip("-").replace("-", "_"))]
        if given:
            output.say(f"without effect here: {', '.join(given)}")
    if args.print_topology:
        output.say("topology\n" + _topology(args.num_instances, local))
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main_thread else None
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for index in range(args.num_instances):
            env = _instance_env(args, index, local, devices, gpus, address)
            if args.verbose > 1:
                shown = " ".join(
                    f"{k}={env[k]}"
                    for k in (*_env.ALL, "CUDA_VISIBLE_DEVICES", "JAX_PLATFORMS", "JAX_NUM_CPU_DEVICES")
                    if k in env
                )
                output.say(f"instance {index}: {shown} {' '.join(program)}")
            try:
                proc = subprocess.Popen(
                    program, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
                )
            except OSError as e:
                output.say(f"cannot start instance {index}: {e}")
                _stop(procs, signal.SIGTERM)
                return 127
            procs.append(proc)
            assert proc.stdout is not None and proc.stderr is not None
            output.follow(index, "stdout", proc.stdout, sys.stdout)
            output.follow(index, "stderr", proc.stderr, sys.stderr)
        failed: tuple[int, int] | None = None
        while failed is None:
            codes = [p.poll() for p in procs]
            failed = next(((i, c) for i, c in enumerate(codes) if c is not None and c != 0), None)
            if failed is None and all(c == 0 for c in codes):
                break
            time.sleep(0.05)
        if failed is None:
            output.drain(STOP_GRACE_S)
            if args.verbose:
                output.say("all instances exited with code 0")
            return 0
        index, code = failed
        _stop(procs, signal.SIGTERM)
        output.drain(STOP_GRACE_S)
        how, exit_code = _describe(code)
        tail = output.hidden.get(index) if args.only_output_from_instance not in (None, index) else None
        if tail:
            output.say(f"instance {index}'s output was hidden; its last lines:\n" + "".join(tail).rstrip("\n"))
        others = "; stopped the other instances" if len(procs) > 1 else ""
        output.say(f"instance {index} {how}{others}")
        return exit_code
    except (KeyboardInterrupt, _TerminatedError) as e:
        interrupted = isinstance(e, KeyboardInterrupt)
        output.say("interrupted; stopping the instances" if interrupted else "terminated; stopping the instances")
        _stop(procs, signal.SIGINT if interrupted else signal.SIGTERM)
        output.drain(STOP_GRACE_S)
        return 130 if interrupted else 143
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
