"""poprun on the network, probed as an operator and an attacker would: what it listens on, and how it takes
connections and messages that are not a poprun's (port scans, forged, replayed and malformed messages), a
peer that goes silent, and a killed poprun's instances' children. Only loopback addresses are used."""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from popdist import _control, _env, launcher

POPRUN = [sys.executable, "-m", "popdist.launcher"]
# Bounds for a loaded machine: nothing here may hang.
QUICK_TIMEOUT_S = 90
CLUSTER_VARIABLES = ("SLURM_", "OMPI_", "JAX_COORDINATOR", _control.SECRET_VARIABLE)
SECRET = "test-secret-" + "0123456789abcdef" * 2


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _env.ALL and not k.startswith(CLUSTER_VARIABLES)}
    env.update(extra)
    return env


def _program(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _listeners(port: int) -> list[str]:
    """The local addresses (hex, as /proc/net/tcp* write them) of the sockets listening at `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                fields = row.split()
                address, port_hex = fields[1].rsplit(":", 1)
                if fields[3] == "0A" and int(port_hex, 16) == port:  # 0A: LISTEN
                    found.append(address)
    return found


LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


def test_one_host_binds_jax_s_coordinator_to_loopback(tmp_path: Path) -> None:
    # Instance 0 runs JAX's coordinator (unauthenticated gRPC): it must not listen on every interface.
    prog = _program(
        tmp_path,
        "listen.py",
        "from __future__ import annotations\nimport json, os, popdist\n"
        + inspect.getsource(_listeners)
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


def _launchers(per_host: Sequence[Sequence[str]], envs: Sequence[dict[str, str]]) -> list[subprocess.Popen[str]]:
    """One poprun per host."""
    return [
        subprocess.Popen([*POPRUN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for args, env in zip(per_host, envs)
    ]


def _finish(procs: Sequence[subprocess.Popen[str]], timeout: float) -> list[tuple[int, str, str]]:
    """Each launcher's exit code, stdout and stderr; kills them all if any overruns."""
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


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = QUICK_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _attack(port: int, launch: dict[str, int]) -> list[bytes]:
    """What an attacker who can reach host 0's poprun tries; the bytes each connection got back."""
    probes: list[bytes | None] = [
        None,  # connect and close: a port scan, `nc -z`
        b"{}\n",
        b"\x00\xff not json\n",
        b"[" * 3000 + b"\n",  # nested too deep for the JSON parser
        b"a" * 100_000,  # far past the line limit, no newline
        b'{"hello": null}\n',
        json.dumps({"hello": 1, "launch": launch}).encode() + b"\n",  # a forged hello: the guessable launch
        json.dumps({"hello": 1, "launch": launch, "nonce": "0" * 32, "mac": "0" * 64}).encode() + b"\n",
        b'{"stop": {"what": "forged", "code": 7}}\n',
        b'{"stop": {"code": "abc"}}\n',
        b'{"failed": {"what": "forged", "code": 9}}\n{"finish": true}\n',
    ]
    answers = []
    for probe in probes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            if probe is not None:
                conn.sendall(probe)
                conn.shutdown(socket.SHUT_WR)
                got = b""
                with contextlib.suppress(OSError):
                    while chunk := conn.recv(65536):
                        got += chunk
                answers.append(got)
    return answers


def _launch_args(address: str, host: int, *rest: str) -> list[str]:
    return ["--num-hosts", "2", "--host-index", str(host), "--coordinator-address", address, *rest]


def test_two_hosts_survive_port_scans_and_forged_messages(tmp_path: Path) -> None:
    # Before host 1 joins, an attacker connects and closes, sends junk, a forged hello with the launch's shape
    # and forged stops. None of it reaches the coordinator's address or ends the launch; nothing leaks the
    # secret, and host 0's poprun listens at the address given only.
    prog = _program(
        tmp_path,
        "ok.py",
        f"""
        import os, popdist
        print("index", popdist.getInstanceIndex(), "secret seen", "{_control.SECRET_VARIABLE}" in os.environ)
        """,
    )
    port = launcher._free_port()
    address = f"127.0.0.1:{port}"
    env = _clean_env(**{_control.SECRET_VARIABLE: SECRET})
    rest = ["--num-instances", "2", "--init-timeout", "60", "-vv", sys.executable, str(prog)]
    host0 = _launchers([_launch_args(address, 0, *rest)], [env])
    try:
        _wait_for(lambda: bool(_listeners(port)) or host0[0].poll() is not None, "host 0's poprun to listen")
        assert set(_listeners(port)) == {"0100007F"}  # 127.0.0.1 only, not every interface
        launch = {"num_hosts": 2, "num_instances": 2, "num_replicas": 2, "ipus_per_replica": 1}
        answers = _attack(port, launch)
        for answer in answers:  # a challenge at most: never a coordinator's address, nor a refusal
            assert all(set(json.loads(line)) == {"challenge"} for line in answer.splitlines()), answer
        assert host0[0].poll() is None, "host 0's poprun ended"
        procs = host0 + _launchers([_launch_args(address, 1, *rest)], [env])
    except BaseException:
        _finish(host0, 1)
        raise
    results = _finish(procs, QUICK_TIMEOUT_S)
    for host, (code, out, err) in enumerate(results):
        assert code == 0, out + err
        assert f"[1,{host}]<stdout>:index {host} secret seen False" in out.splitlines()
        assert SECRET not in out + err
    assert "ignored a connection from 127.0.0.1: not a poprun of this launch" in results[0][2]
