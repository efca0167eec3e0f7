"""Starting poprun launchers from tests: a clean environment, programs to launch, and launchers waited on with
a bound, for the runtime's poprun tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from popdist import _control, _env

POPRUN = [sys.executable, "-m", "popdist.launcher"]
# What a launch inherits from a cluster (or from an outer poprun) and a test's launch must not.
CLUSTER_VARIABLES = ("SLURM_", "OMPI_", "JAX_COORDINATOR", _control.SECRET_VARIABLE)


def clean_env(secret: str | None = None, **extra: str) -> dict[str, str]:
    """This process's environment without popdist's or a cluster's variables; with `secret` as the launch's."""
    env = {k: v for k, v in os.environ.items() if k not in _env.ALL and not k.startswith(CLUSTER_VARIABLES)}
    if secret is not None:
        env[_control.SECRET_VARIABLE] = secret
    env.update(extra)
    return env


def write_program(tmp_path: Path, name: str, text: str) -> Path:
    """`text`, dedented, as the program `tmp_path / name`."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def launchers(per_host: Sequence[Sequence[str]], envs: Sequence[dict[str, str]]) -> list[subprocess.Popen[str]]:
    """One poprun per host, started together, each with its arguments and environment."""
    return [
        subprocess.Popen([*POPRUN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for args, env in zip(per_host, envs, strict=True)
    ]


def finish(procs: Sequence[subprocess.Popen[str]], timeout: float) -> list[tuple[int, str, str]]:
    """Each launcher's exit code, stdout and stderr; kills them all (stopped ones too) if any overruns."""
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()
    return results


def gone(pid: int) -> bool:
    """Whether no process `pid` is left."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
