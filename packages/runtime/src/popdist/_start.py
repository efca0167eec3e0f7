"""How poprun starts this host's share of a launch: the devices, the other hosts joined, each instance's
environment, and the instances started directly or as the ranks of one mpirun."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable

from popdist import _control, _env, _hosts, _mpi, _reaper, _wire
from popdist._cli import Launch
from popdist._instances import Instance, die_with_parent
from popdist._mpijob import MpiJob
from popdist._output import Output


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


def choose_devices(asked: str, replicas: int) -> tuple[str, list[str]]:
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


def free_port() -> int:
    """A TCP port free on this host now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def instance_env(
    args: argparse.Namespace, launch: Launch, index: int, devices: str, gpus: list[str], address: str
) -> dict[str, str]:
    """The environment of instance `index`: popdist's variables, its devices and JAX's coordinator."""
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


def connect(launch: Launch, timeout: float, output: Output) -> tuple[_wire.Link | None, str]:
    """Join the other hosts' poprun (if any); JAX's coordinator address for the instances."""
    place = launch.place
    if place.num_hosts == 1:
        return None, f"127.0.0.1:{free_port()}"
    assert place.address is not None
    assert launch.secret is not None
    if place.host_index == 0:
        jax_address = _hosts.join_address(place.coordinator_host, free_port())
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


def _start_piped(line: list[str], env: dict[str, str], arm: Callable[[], None] | None) -> subprocess.Popen[bytes]:
    """Start `line` in a session of its own (out of poprun's terminal group), its output piped to poprun and `arm`
    run in it first."""
    return subprocess.Popen(
        line, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, preexec_fn=arm
    )


def start_directly(
    program: list[str],
    envs: dict[int, dict[str, str]],
    output: Output,
    procs: list[Instance],
    reaper: _reaper.Reaper | None = None,
) -> tuple[int, OSError] | None:
    """Start each instance as poprun's own subprocess, into `procs`; the instance that cannot start, if any."""
    arm = die_with_parent()
    for index, env in envs.items():
        try:
            proc = _start_piped(program, env, arm)  # `arm` only calls prctl, looked up before the fork
        except OSError as e:
            return index, e
        procs.append(proc)
        if reaper is not None:
            reaper.watch(proc.pid)
        assert proc.stdout is not None and proc.stderr is not None
        output.follow(index, "stdout", proc.stdout, sys.stdout)
        output.follow(index, "stderr", proc.stderr, sys.stderr)
    return None


def start_through_mpirun(
    args: argparse.Namespace, mpirun: _mpi.Mpirun, program: list[str], envs: dict[int, dict[str, str]], output: Output
) -> MpiJob:
    """Start one mpirun whose ranks run the instances (OSError if it cannot start)."""
    first = min(envs)
    sinks = {"stdout": sys.stdout, "stderr": sys.stderr}
    listener = _mpi.Listener(len(envs), lambda i, kind, pipe: output.follow(first + i, kind, pipe, sinks[kind]))
    base, changes = _mpi.rank_environments([envs[i] for i in sorted(envs)])
    env = {**base, _mpi.SOCKET_VARIABLE: listener.path, _mpi.RANK_ENV_VARIABLE: json.dumps(changes)}
    line = _mpi.command(mpirun, len(envs), program, not args.verbose, args.mpi_global_args, args.mpi_local_args)
    output.say(f"starting the instances through mpirun: {shlex.join(line)}", verbose=True)
    try:
        # Ctrl-C reaches poprun alone, which stops the instances as without MPI; mpirun stops the job should
        # poprun be killed.
        proc = _start_piped(line, env, die_with_parent())
    except OSError:
        listener.close()
        raise
    assert proc.stdout is not None and proc.stderr is not None
    output.relay(proc.stdout, sys.stdout)
    output.relay(proc.stderr, sys.stderr)
    return MpiJob(listener, proc)
