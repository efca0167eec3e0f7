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

poprun's parts live in modules of their own, which `main` here runs in order: the command line
(`popdist._cli`), the start (`popdist._start`: devices, hosts joined, environments, instances started),
the output relay (`popdist._output`), the supervision of a running launch (`popdist._supervise`), the
mpirun job (`popdist._mpijob`) and the instances as processes (`popdist._instances`).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from popdist import _control, _env, _reaper, _wire
from popdist._cli import MPI_OPTIONS, NO_EFFECT_OPTIONS, Launch, MpiChoice, build_parser, dest, parse, topology
from popdist._instances import STOP_GRACE_S, Instance, stop
from popdist._mpijob import MpiJob
from popdist._output import HIDDEN_TAIL_LINES, Output
from popdist._start import choose_devices, connect, instance_env, start_directly, start_through_mpirun
from popdist._supervise import LAUNCH_FAILED, Supervisor

# poprun's public names, whichever module of popdist holds them.
__all__ = [
    "HIDDEN_TAIL_LINES",
    "LAUNCH_FAILED",
    "MPI_OPTIONS",
    "NO_EFFECT_OPTIONS",
    "STOP_GRACE_S",
    "build_parser",
    "main",
]


class _TerminatedError(Exception):
    """Raised in the main thread by SIGTERM, to stop the instances as Ctrl-C does."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _TerminatedError()


def _announce(args: argparse.Namespace, launch: Launch, mpi: MpiChoice, devices: str, output: Output) -> None:
    """Say what poprun chose (with -v), which options have no effect, and the topology if asked."""
    place = launch.place
    output.say(
        f"{launch.num_instances} instance(s) on {place.num_hosts} host(s) (this is host {place.host_index}, from "
        f"{place.source}), {launch.num_replicas} replica(s), {launch.local} per instance, on {devices.upper()} devices",
        verbose=True,
    )
    unused = NO_EFFECT_OPTIONS if mpi.mpirun is not None else NO_EFFECT_OPTIONS + MPI_OPTIONS
    given = [flags[-1] for flags, _ in unused if getattr(args, dest(flags))]
    if given:
        output.say(f"without effect here: {', '.join(given)}", verbose=True)
    if args.print_topology:
        output.say("topology\n" + topology(launch))


def _show_environments(output: Output, envs: dict[int, dict[str, str]], program: list[str]) -> None:
    """With -vv: each instance's popdist and device variables, and its command line."""
    for index, env in envs.items():
        shown = " ".join(
            f"{k}={env[k]}"
            for k in (*_env.ALL, "CUDA_VISIBLE_DEVICES", "JAX_PLATFORMS", "JAX_NUM_CPU_DEVICES")
            if k in env
        )
        output.say(f"instance {index}: {shown} {' '.join(program)}")


class _Run:
    """This host's share of one launch, and what it has started so far: what an interruption stops and the end
    closes."""

    def __init__(self, args: argparse.Namespace, program: list[str], launch: Launch, output: Output) -> None:
        self.args, self.program, self.launch, self.output = args, program, launch, output
        self.procs: list[Instance] = []
        self.link: _wire.Link | None = None
        self.job: MpiJob | None = None
        self.reaper: _reaper.Reaper | None = None

    def run(self, mpi: MpiChoice, devices: str, gpus: list[str], timeout: float) -> int:
        """Join the other hosts, start this host's instances and watch them to the end; poprun's exit code."""
        launch, output = self.launch, self.output
        try:
            self.link, jax_address = connect(launch, timeout, output)
        except (TimeoutError, _control.LaunchError, OSError) as e:
            knob = "--init-timeout or " + _env.INIT_TIMEOUT if isinstance(e, TimeoutError) else None
            output.say(f"host {launch.place.host_index}: {e}" + (f" ({knob})" if knob else ""))
            return LAUNCH_FAILED
        output.say(f"JAX's coordinator: {jax_address}", verbose=True)
        envs = {
            index: instance_env(self.args, launch, index, devices, gpus, jax_address)
            for index in range(launch.first, launch.first + launch.per_host)
        }
        if self.args.verbose > 1:
            _show_environments(output, envs, self.program)
        # Stops the instances' own children should poprun be killed (Linux's parent-death signal reaches the
        # instances only).
        self.reaper = _reaper.Reaper.start()
        code = self._start(mpi, envs)
        if code is not None:
            return code
        shown = self.args.only_output_from_instance
        ending = Supervisor(launch, self.procs, self.link, output, shown, self.job, self.reaper).run()
        if ending.line is not None:
            output.say(ending.line)
        elif ending.code == 0:
            output.say("all instances exited with code 0", verbose=True)
        return ending.code

    def _start(self, mpi: MpiChoice, envs: dict[int, dict[str, str]]) -> int | None:
        """Start the instances, through mpirun or directly; poprun's exit code if they could not all start."""
        output = self.output
        if mpi.mpirun is None:
            output.say(f"starting the instances without MPI ({mpi.reason}): they are not MPI ranks")
            failed = start_directly(self.program, envs, output, self.procs, self.reaper)
        else:
            try:
                self.job = start_through_mpirun(self.args, mpi.mpirun, self.program, envs, output)
            except OSError as e:
                output.say(f"cannot start mpirun: {e}")
                return 127
            self.procs.extend(self.job.ranks)
            if self.reaper is not None:
                self.reaper.watch(self.job.mpirun.pid)
            failed = None
        if failed is None:
            return None
        index, error = failed
        output.say(f"cannot start instance {index}: {error}")
        stop(self.procs, signal.SIGTERM)
        self._tell_others(f"instance {index} on host {self.launch.place.host_index} could not start", 127)
        return 127

    def _tell_others(self, what: str, code: int) -> None:
        """Have the other hosts' poprun stop their instances too, passing on `code` (host 0 tells them itself)."""
        if self.link is not None:
            report = {"what": what, "code": code}
            self.link.broadcast({"stop" if self.launch.place.host_index == 0 else "failed": report})

    def interrupted(self, by_ctrl_c: bool) -> int:
        """Stop everything after Ctrl-C (or SIGTERM); poprun's exit code."""
        how, code = ("interrupted", 130) if by_ctrl_c else ("terminated", 143)
        self.output.say(f"{how}; stopping the instances")
        self._tell_others(f"host {self.launch.place.host_index}'s poprun was {how}", code)
        stop(self.procs, signal.SIGINT if by_ctrl_c else signal.SIGTERM)
        if self.job is not None:
            self.job.finish()
        self.output.drain(STOP_GRACE_S)
        return code

    def close(self) -> None:
        """Remove the mpirun job's socket, close the other hosts' connections and end the reaper."""
        if self.job is not None:
            self.job.close()
        if self.link is not None:
            self.link.close()
        if self.reaper is not None:
            self.reaper.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run poprun with `argv` (default: the command line); returns the exit code."""
    args, program, launch, mpi = parse(build_parser(), argv)
    devices, gpus = choose_devices(args.devices, launch.per_host * launch.local)
    output = Output(args.only_output_from_instance, args.verbose)
    _announce(args, launch, mpi, devices, output)
    timeout = args.init_timeout if args.init_timeout is not None else _env.read_timeout()
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main_thread else None
    run = _Run(args, program, launch, output)
    try:
        return run.run(mpi, devices, gpus, timeout)
    except (KeyboardInterrupt, _TerminatedError) as e:
        return run.interrupted(isinstance(e, KeyboardInterrupt))
    finally:
        run.close()
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
