"""poprun on the network, probed as an operator and an attacker would: what it listens on, and how it takes
connections and messages that are not a poprun's (port scans, forged, replayed and malformed messages), a
peer that goes silent, and a killed poprun's instances' children. Only loopback addresses are used."""

from __future__ import annotations

import contextlib
import inspect
import json
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from popdist import _control, _env, _start, _supervise, _wire
from poprun_helpers import POPRUN, clean_env, finish, gone, launchers, write_program

# Bounds for a loaded machine: nothing here may hang.
QUICK_TIMEOUT_S = 90
SECRET = "test-secret-" + "0123456789abcdef" * 2


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


@pytest.mark.slow
def test_one_host_binds_jax_s_coordinator_to_loopback(tmp_path: Path) -> None:
    # Instance 0 runs JAX's coordinator (unauthenticated gRPC): it must not listen on every interface.
    prog = write_program(
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
        env=clean_env(),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(ln for ln in done.stdout.splitlines() if "listening" in ln)
    found = json.loads(line.split("listening", 1)[1])
    assert found and set(found) <= LOOPBACK, line


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = QUICK_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


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
    prog = write_program(
        tmp_path,
        "ok.py",
        f"""
        import os, popdist
        print("index", popdist.getInstanceIndex(), "secret seen", "{_control.SECRET_VARIABLE}" in os.environ)
        """,
    )
    port = _start.free_port()
    address = f"127.0.0.1:{port}"
    env = clean_env(**{_control.SECRET_VARIABLE: SECRET})
    rest = ["--num-instances", "2", "--init-timeout", "60", "-vv", sys.executable, str(prog)]
    host0 = launchers([_launch_args(address, 0, *rest)], [env])
    try:
        _wait_for(lambda: bool(_listeners(port)) or host0[0].poll() is not None, "host 0's poprun to listen")
        assert set(_listeners(port)) == {"0100007F"}  # 127.0.0.1 only, not every interface
        launch = {"num_hosts": 2, "num_instances": 2, "num_replicas": 2, "ipus_per_replica": 1}
        answers = _attack(port, launch)
        for answer in answers:  # a challenge at most: never a coordinator's address, nor a refusal
            assert all(set(json.loads(line)) == {"challenge"} for line in answer.splitlines()), answer
        assert host0[0].poll() is None, "host 0's poprun ended"
        procs = host0 + launchers([_launch_args(address, 1, *rest)], [env])
    except BaseException:
        finish(host0, 1)
        raise
    results = finish(procs, QUICK_TIMEOUT_S)
    for host, (code, out, err) in enumerate(results):
        assert code == 0, out + err
        assert f"[1,{host}]<stdout>:index {host} secret seen False" in out.splitlines()
        assert SECRET not in out + err
    assert "ignored a connection from 127.0.0.1: not a poprun of this launch" in results[0][2]


def _signed(sender: int, nonces: tuple[str, str], seq: int, body: object, secret: bytes = SECRET.encode()) -> bytes:
    mac = _wire.sign(secret, "message", sender, nonces, seq, body)
    return json.dumps({"seq": seq, "body": body, "mac": mac}).encode() + b"\n"


def _events(link: _wire.Link, wait: float) -> list[_wire.Event]:
    got = []
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            got.append(link.events.get(timeout=0.05))
    return got


@pytest.mark.slow
def test_a_link_takes_only_its_peer_s_signed_messages_once() -> None:
    # Host 0's end of an established link; the test plays host 1 (and an attacker on the same connection).
    ours, theirs = socket.socketpair()
    nonces = ("a" * 32, "b" * 32)
    link = _wire.Link(0, SECRET.encode(), {1: _wire.Session(_wire.Conn(ours), 1, nonces)})
    try:
        done = _signed(1, nonces, 1, {"done": 1})
        theirs.sendall(done)
        theirs.sendall(done)  # replayed: the same sequence number
        for line in [
            b'{"stop": {"what": "forged", "code": 7}}\n',  # unsigned
            b'{"stop": {"code": "abc"}}\n',
            _signed(1, nonces, 2, {"failed": {"what": "x", "code": 5}}, b"another secret of 32 characters"),
            _signed(1, ("c" * 32, "b" * 32), 3, {"failed": {"what": "x", "code": 5}}),  # another connection's
            _signed(0, nonces, 4, {"failed": {"what": "x", "code": 5}}),  # sent back to its sender
            _signed(1, nonces, 5, {"failed": {"what": "x", "code": "abc"}}),  # signed, but not a report
            _signed(1, nonces, 6, {"failed": {"what": "x", "code": 300}}),
            _signed(1, nonces, 7, {"stop": {"what": "x", "code": 5}}),  # only host 0 says stop
            _signed(1, nonces, 8, {"done": 2}),
            b"x" * (_wire.MAX_LINE * 3) + b"\n",
            b"[" * 3000 + b"\n",
            b"\xff\xfe\n",
            _signed(1, nonces, 9, {"failed": {"what": "instance 3 failed", "code": 3}}),
            _signed(1, nonces, 9, {"failed": {"what": "again", "code": 4}}),  # replayed number
        ]:
            theirs.sendall(line)
        got = _events(link, 1.0)
        assert got == [(1, {"done": 1}), (1, {"failed": {"what": "instance 3 failed", "code": 3}})]
    finally:
        link.close()
        theirs.close()


def test_a_silent_peer_is_lost_and_closing_does_not_wait_for_it() -> None:
    ours, theirs = socket.socketpair()
    nonces = ("a" * 32, "b" * 32)
    start = time.monotonic()
    link = _wire.Link(0, SECRET.encode(), {1: _wire.Session(_wire.Conn(ours), 1, nonces)}, silence_s=1.0)
    try:
        theirs.sendall(b"{}\n" + b"x" * 100)  # not a message: does not count as being heard from
        host, event = link.events.get(timeout=10)
        assert (host, event) == (1, _wire.Lost(1.0))
        assert time.monotonic() - start < 5
        heartbeats = theirs.recv(65536)  # the link kept sending its own
        assert b'"beat":true' in heartbeats
    finally:
        closing = time.monotonic()
        link.close()  # the peer never closes its side: bounded by CLOSE_S
        assert time.monotonic() - closing < _wire.CLOSE_S + 2
        theirs.close()


@pytest.mark.slow
def test_replayed_hello_and_a_wrong_secret_do_not_join(tmp_path: Path) -> None:
    port = _start.free_port()
    launch = {"num_hosts": 2, "num_instances": 2, "num_replicas": 2, "ipus_per_replica": 1}
    secret = SECRET.encode()
    result: list[object] = []

    def host0() -> None:
        try:
            link = _control.gather("127.0.0.1", port, 2, launch, "127.0.0.1:1234", 30, secret)
            result.append(link)
        except BaseException as e:
            result.append(e)

    thread = threading.Thread(target=host0, daemon=True)
    thread.start()
    _wait_for(lambda: bool(_listeners(port)), "host 0 to listen")
    # A hello that answered another connection's challenge, replayed on a new connection, is ignored.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as first:
        challenge = json.loads(first.makefile("rb").readline())["challenge"]
    nonces = (challenge, "d" * 32)
    hello = {"hello": 1, "launch": launch, "nonce": nonces[1], "mac": _wire.sign(secret, "hello", nonces, 1, launch)}
    with socket.create_connection(("127.0.0.1", port), timeout=10) as replay:
        reader = replay.makefile("rb")
        assert "challenge" in json.loads(reader.readline())
        replay.sendall(json.dumps(hello).encode() + b"\n")
        assert reader.readline() == b""  # closed without an answer
    # A poprun with another secret is not let in, and gives up when its time is out.
    with pytest.raises(TimeoutError, match="did not start the launch within 2 s"):
        _control.join(f"127.0.0.1:{port}", 1, launch, 2, b"another secret, 32 characters long")
    assert not result, "host 0 ended"
    link, jax_address = _control.join(f"127.0.0.1:{port}", 1, launch, 30, secret)
    thread.join(30)
    assert jax_address == "127.0.0.1:1234"
    assert len(result) == 1 and isinstance(result[0], _wire.Link), result
    result[0].close()
    link.close()


def test_poprun_needs_a_secret_over_several_hosts() -> None:
    address = f"127.0.0.1:{_start.free_port()}"
    for env, message in [
        (clean_env(), f"a launch over 2 hosts needs a secret that its hosts share: set {_control.SECRET_VARIABLE}"),
        (clean_env(**{_control.SECRET_VARIABLE: "short"}), f"{_control.SECRET_VARIABLE} is too short"),
    ]:
        done = subprocess.run(
            [*POPRUN, *_launch_args(address, 0, "true")], capture_output=True, text=True, timeout=60, env=env
        )
        assert done.returncode == 2 and message in done.stderr, done.stderr
    made = subprocess.run([*POPRUN, "--new-secret"], capture_output=True, text=True, timeout=60, env=clean_env())
    assert made.returncode == 0 and len(made.stdout.strip()) == 64, made


@pytest.mark.slow
@pytest.mark.parametrize("silent", [1, 0])
def test_a_silent_host_ends_the_launch_within_30_s(tmp_path: Path, silent: int) -> None:
    # One host's poprun is stopped (SIGSTOP: connected, but silent) while its instance runs; the other host's
    # instance has finished. The other host's poprun must not wait for it for ever.
    prog = write_program(
        tmp_path,
        "wait.py",
        f"""
        import os, time
        import popdist
        from pathlib import Path
        index = popdist.getInstanceIndex()
        Path({str(tmp_path)!r}, f"pid{{index}}").write_text(str(os.getpid()))
        if index == {silent}:
            time.sleep({QUICK_TIMEOUT_S * 2})
        """,
    )
    address = f"127.0.0.1:{_start.free_port()}"
    env = clean_env(**{_control.SECRET_VARIABLE: SECRET})
    rest = ["--num-instances", "2", "--init-timeout", "60", sys.executable, str(prog)]
    procs = launchers([_launch_args(address, h, *rest) for h in range(2)], [env, env])
    other = 1 - silent
    try:
        _wait_for(lambda: all((tmp_path / f"pid{i}").exists() for i in range(2)), "the instances to start")
        procs[silent].send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        code, out, err = finish([procs[other]], QUICK_TIMEOUT_S)[0]
        took = time.monotonic() - stopped
    finally:
        procs[silent].kill()  # stopped: it would never finish on its own
        finish(procs, QUICK_TIMEOUT_S)
    assert code == _supervise.LAUNCH_FAILED, out + err
    assert err.splitlines()[-1] == (
        f"poprun: lost contact with host {silent}'s poprun after {_wire.SILENCE_S:g} s of silence; "
        "stopped the other instances"
    )
    assert took < 30, took
    silent_instance = int((tmp_path / f"pid{silent}").read_text())
    _wait_for(lambda: gone(silent_instance), "the silent host's instance to end with its poprun", 30)


@pytest.mark.slow
@pytest.mark.parametrize("hosts", [1, 2])
def test_a_killed_poprun_leaves_no_instance_nor_its_children(tmp_path: Path, hosts: int) -> None:
    # Each instance starts a child of its own; poprun is then killed with SIGKILL (no chance to clean up).
    prog = write_program(
        tmp_path,
        "spawn.py",
        f"""
        import os, subprocess, sys, time
        import popdist
        from pathlib import Path
        index = popdist.getInstanceIndex()
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep({QUICK_TIMEOUT_S * 2})"])
        Path({str(tmp_path)!r}, f"pids{{index}}").write_text(f"{{os.getpid()}} {{child.pid}}")
        time.sleep({QUICK_TIMEOUT_S * 2})
        """,
    )
    env = clean_env(**{_control.SECRET_VARIABLE: SECRET})
    rest = ["--num-instances", str(2 * hosts), "--mpi", "off", "--init-timeout", "60", sys.executable, str(prog)]
    if hosts == 1:
        procs = launchers([rest], [env])
    else:
        address = f"127.0.0.1:{_start.free_port()}"
        procs = launchers([_launch_args(address, h, *rest) for h in range(2)], [env, env])
    files = [tmp_path / f"pids{i}" for i in range(2 * hosts)]
    try:
        _wait_for(lambda: all(f.exists() and len(f.read_text().split()) == 2 for f in files), "the instances")
        procs[-1].kill()
        pids = [int(pid) for f in files for pid in f.read_text().split()]
        # The killed host's, and the other host's too (its poprun stops them on losing contact).
        _wait_for(lambda: all(gone(pid) for pid in pids), "every instance and child to end", 30)
    finally:
        for p in procs:
            p.kill()
        finish(procs, QUICK_TIMEOUT_S)
