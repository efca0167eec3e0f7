"""How the `poprun`s of several hosts start and stop one launch together.

Host 0's poprun listens at the launch's address (host:port), on that address only. Every other host's
poprun connects there, proves that it holds the launch's secret, says which host it is and what launch
it was given (hosts, instances, replicas), and waits. Once every host has joined with the same launch,
host 0 names the address of JAX's coordinator (which instance 0 runs, on host 0, at a port free there)
and each poprun starts its instances. While they run, a poprun tells host 0 of an instance that failed,
or that all of its instances succeeded; host 0 then tells every poprun to stop (saying what failed and
the exit code to pass on) or that the launch is finished. A connection that closes, or a peer that
says nothing for SILENCE_S seconds (each poprun sends a heartbeat every HEARTBEAT_S), counts as a
failure of that host's poprun.

Every host is given the same secret (POPRUN_SECRET); it never travels. Joining is a challenge and
response: host 0 sends a fresh random nonce, the joining host answers with its own nonce and an
HMAC-SHA256, under the secret, of both nonces and its hello; host 0 answers with an HMAC of both nonces
and its answer, so each side knows the other holds the secret. The joined hosts then talk over a
`popdist._wire.Link`, whose messages are signed under the secret and both nonces. Anything else (a port
scan, a connection that closes or says nothing, a malformed, oversized or unauthenticated hello) is
ignored: it never ends a launch.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import queue
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from popdist import _wire
from popdist._hosts import split_address

# The variable that gives every host's poprun the launch's secret.
SECRET_VARIABLE = "POPRUN_SECRET"
# A secret shorter than this is refused: it could be guessed.
MIN_SECRET_CHARS = 16
# Seconds a connection to host 0 has to prove itself before it is dropped.
HANDSHAKE_S = 10.0
# Unproven connections handled at once; more are closed as they come (a flood cannot exhaust threads).
MAX_PENDING = 32


class LaunchError(Exception):
    """The hosts cannot start the launch (they disagree on it, or one of them refused it)."""


def new_secret() -> str:
    """A fresh secret for a launch (256 random bits, as hex)."""
    return secrets.token_hex(32)


def read_secret() -> bytes | None:
    """The secret in POPRUN_SECRET (None when unset); ValueError if it is too short to be one."""
    text = os.environ.get(SECRET_VARIABLE, "").strip()
    if not text:
        return None
    if len(text) < MIN_SECRET_CHARS:
        raise ValueError(
            f"{SECRET_VARIABLE} is too short to keep the launch's hosts to themselves (at least "
            f"{MIN_SECRET_CHARS} characters; `poprun --new-secret` prints one)"
        )
    return text.encode()


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening at `host`:`port` only (the first address `host` has)."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        return socket.create_server(address, family=family, backlog=64)
    except OSError as e:
        raise OSError(f"cannot listen at {host}:{port}: {e.strerror or e}") from None


@dataclass
class _Hello:
    """A joining poprun that proved it holds the secret: its connection, host index, launch and nonces."""

    conn: _wire.Conn
    host: object
    launch: object
    nonces: tuple[str, str]


def _answer(secret: bytes, hello: _Hello, kind: str, value: object) -> None:
    """Host 0's signed answer to a proven hello."""
    with contextlib.suppress(OSError):
        hello.conn.send({kind: value, "mac": _wire.sign(secret, kind, hello.nonces, value)})


def _not_joined(joined: dict[int, _Hello], num_hosts: int, dropped: int, timeout: float, port: int) -> TimeoutError:
    """The error naming the hosts that did not join in time, and the connections dropped meanwhile."""
    missing = [str(h) for h in range(1, num_hosts) if h not in joined]
    shown = ", ".join(missing[:20]) + (f" and {len(missing) - 20} more" if len(missing) > 20 else "")
    hint = (
        f"; {dropped} connection(s) did not prove they hold the launch's secret (is "
        f"{SECRET_VARIABLE} the same on every host?)"
        if dropped
        else ""
    )
    return TimeoutError(f"host(s) {shown} did not join within {timeout:g} s at port {port}{hint}")


def gather(
    bind_host: str,
    port: int,
    num_hosts: int,
    launch: _wire.Message,
    jax_address: str,
    timeout: float,
    secret: bytes,
    say: Callable[[str], None] = lambda _: None,
) -> _wire.Link:
    """On host 0: wait at `bind_host`:`port` for every other host's poprun to join `launch`, then send them
    `jax_address`.

    TimeoutError names the hosts that had not joined after `timeout` seconds; LaunchError, a host that
    joined with another launch (every joined host is then told to stop). Connections that do not prove
    they hold `secret` are dropped (`say` notes each) and change nothing."""
    deadline = time.monotonic() + timeout
    proven: queue.Queue[_Hello] = queue.Queue()
    pending = threading.BoundedSemaphore(MAX_PENDING)
    dropped = [0]
    joined: dict[int, _Hello] = {}
    finished = threading.Event()  # once set, connections still proving themselves are not wanted

    def handshake(conn: _wire.Conn, peer: str) -> None:
        try:
            hello = _prove(conn, secret, min(deadline, time.monotonic() + HANDSHAKE_S))
            if hello is None:
                dropped[0] += 1
                say(f"ignored a connection from {peer}: not a poprun of this launch")
                conn.close()
            elif finished.is_set():
                conn.close()
            else:
                proven.put(hello)
        finally:
            pending.release()

    with _listen(bind_host, port) as server:
        server.settimeout(_wire.POLL_S)
        try:
            while len(joined) < num_hosts - 1:
                if time.monotonic() >= deadline:
                    raise _not_joined(joined, num_hosts, dropped[0], timeout, port)
                with contextlib.suppress(queue.Empty):
                    while True:
                        hello = proven.get_nowait()
                        problem = _check_hello(hello, launch, joined, num_hosts)
                        if problem is not None:
                            _answer(secret, hello, "refused", problem)
                            hello.conn.close()
                            raise LaunchError(problem)
                        assert isinstance(hello.host, int)
                        joined[hello.host] = hello
                try:
                    sock, peer = server.accept()
                except TimeoutError:
                    continue
                if not pending.acquire(blocking=False):
                    sock.close()  # too many unproven connections at once
                    continue
                threading.Thread(target=handshake, args=(_wire.Conn(sock), str(peer[0])), daemon=True).start()
        except BaseException as e:
            for hello in joined.values():
                _answer(secret, hello, "refused", f"host 0's poprun gave up: {e}"[: _wire.MAX_TEXT])
                hello.conn.close()
            raise
        finally:
            finished.set()
    for hello in joined.values():
        _answer(secret, hello, "start", {"jax_address": jax_address})
    sessions = {h: _wire.Session(hello.conn, h, hello.nonces) for h, hello in joined.items()}
    return _wire.Link(0, secret, sessions)


def _prove(conn: _wire.Conn, secret: bytes, deadline: float) -> _Hello | None:
    """Challenge a new connection; its hello if it proves it holds `secret`, else None."""
    challenge = _wire.new_nonce()
    try:
        conn.send({"challenge": challenge})
        hello = conn.read_json(deadline)
        if hello is None or hello.keys() != {"hello", "launch", "nonce", "mac"}:
            return None
        nonce, mac = hello["nonce"], hello["mac"]
        if not _wire.is_nonce(nonce) or not isinstance(mac, str):
            return None
        nonces = (challenge, nonce)
        if not hmac.compare_digest(_wire.sign(secret, "hello", nonces, hello["hello"], hello["launch"]), mac):
            return None
    except (OSError, TimeoutError, ValueError, RecursionError):
        return None
    return _Hello(conn, hello["hello"], hello["launch"], nonces)


def _check_hello(hello: _Hello, launch: _wire.Message, joined: dict[int, _Hello], num_hosts: int) -> str | None:
    """Why a poprun that proved it holds the secret cannot take part, or None."""
    host = hello.host
    if not _wire.is_int(host, 1, num_hosts - 1):
        return f"a poprun joined as host {str(host)[:50]!r}, which is not one of hosts 1..{num_hosts - 1}"
    if host in joined:
        return f"two poprun joined as host {host}"
    if hello.launch != launch:
        return f"host {host}'s poprun was given another launch: {str(hello.launch)[:500]} (host 0: {launch})"
    return None


def join(address: str, host_index: int, launch: _wire.Message, timeout: float, secret: bytes) -> tuple[_wire.Link, str]:
    """On another host: join host 0's poprun at `address`; returns the link and JAX's coordinator address.

    Whatever at `address` does not prove it holds `secret` is left, and joining tried again. TimeoutError if
    host 0's poprun cannot be reached, or does not start the launch, within `timeout` seconds; LaunchError
    if it refuses this host."""
    host, port = split_address(address)
    deadline = time.monotonic() + timeout
    reached = False
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection((host, port), timeout=max(0.1, min(1.0, deadline - time.monotonic())))
        except OSError:
            time.sleep(_wire.POLL_S)
            continue
        reached = True
        conn = _wire.Conn(sock)
        try:
            answer = _join_once(conn, host_index, launch, deadline, secret)
        except LaunchError:
            conn.close()
            raise
        if answer is not None:
            link, jax_address = answer
            return link, jax_address
        conn.close()
        time.sleep(_wire.POLL_S)
    if not reached:
        raise TimeoutError(f"could not reach host 0's poprun at {address} within {timeout:g} s")
    raise TimeoutError(
        f"host 0's poprun at {address} did not start the launch within {timeout:g} s (other hosts missing, or "
        f"another {SECRET_VARIABLE} there?)"
    )


def _join_once(
    conn: _wire.Conn, host_index: int, launch: _wire.Message, deadline: float, secret: bytes
) -> tuple[_wire.Link, str] | None:
    """One try at joining through `conn`: the link and JAX's address, or None if the peer did not prove
    itself (or went away); LaunchError if host 0's poprun refused this host."""
    try:
        challenge = conn.read_json(deadline)
        if challenge is None or not _wire.is_nonce(challenge.get("challenge")):
            return None
        nonces = (str(challenge["challenge"]), _wire.new_nonce())
        mac = _wire.sign(secret, "hello", nonces, host_index, launch)
        conn.send({"hello": host_index, "launch": launch, "nonce": nonces[1], "mac": mac})
        while True:
            answer = conn.read_json(deadline)
            if answer is None:
                return None
            kind = next((k for k in ("start", "refused") if k in answer), None)
            if kind is None or answer.keys() != {kind, "mac"} or not isinstance(answer["mac"], str):
                continue
            if not hmac.compare_digest(_wire.sign(secret, kind, nonces, answer[kind]), answer["mac"]):
                continue
            if kind == "refused":
                raise LaunchError(f"host 0's poprun did not start this host: {str(answer[kind])[: _wire.MAX_TEXT]}")
            start = answer[kind]
            if not isinstance(start, dict) or not isinstance(start.get("jax_address"), str):
                return None
            return _wire.Link(host_index, secret, {0: _wire.Session(conn, 0, nonces)}), start["jax_address"]
    except (OSError, TimeoutError):
        return None
