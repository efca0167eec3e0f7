"""poprun on the network, probed as an operator and an attacker would: what it listens on, and how it takes
connections and messages that are not a poprun's (port scans, forged, replayed and malformed messages), a
peer that goes silent, and a killed poprun's instances' children. Only loopback addresses are used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from popdist import _env

POPRUN = [sys.executable, "-m", "popdist.launcher"]
# Bounds for a loaded machine: nothing here may hang.
QUICK_TIMEOUT_S = 90
CLUSTER_VARIABLES = ("SLURM_", "OMPI_", "JAX_COORDINATOR", "POPRUN_SECRET")
SECRET = "test-secret-" + "0123456789abcdef" * 2


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _env.ALL and not k.startswith(CLUSTER_VARIABLES)}
    env.update(extra)
    return env


def _program(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# The local addresses (hex, as /proc/net/tcp* write them) of the sockets listening at `port`: code that the
# tests run in poprun's instances too.
LISTENERS = """
def _listeners(port):
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                fields = row.split()
                address, port_hex = fields[1].rsplit(":", 1)
                if fields[3] == "0A" and int(port_hex, 16) == port:  # 0A: LISTEN
                    found.append(address)
    return found
"""
exec(LISTENERS)


LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


def test_one_host_binds_jax_s_coordinator_to_loopback(tmp_path: Path) -> None:
    # Instance 0 runs JAX's coordinator (unauthenticated gRPC): it must not listen on every interface.
    prog = _program(
        tmp_path,
        "listen.py",
        "import json, os, popdist\n"
        + LISTENERS
        + f"""
popdist.init()
if popdist.getInstanceIndex() == 0:
    port = int(os.environ["{_env.COORDINATOR_ADDRESS}"].rsplit(":", 1)[1])
    print("listening", json.dumps(sorted(_listeners(port))))
""",
    )
    done = subprocess.run(
        [*POPRUN, "--num-instances", "2", "--mpi", "off", "--init-timeout", "120", sys.executable, str(prog)],
        capture_output=True,
        text=True,
        timeout=240,
        env=_clean_env(),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(ln for ln in done.stdout.splitlines() if "listening" in ln)
    found = json.loads(line.split("listening", 1)[1])
    assert found and set(found) <= LOOPBACK, line
