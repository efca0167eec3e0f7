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

Messages are JSON objects, one a line of at most MAX_LINE bytes. Every host is given the same secret
(POPRUN_SECRET); it never travels. Joining is a challenge and response: host 0 sends a fresh random
nonce, the joining host answers with its own nonce and an HMAC-SHA256, under the secret, of both nonces
and its hello; host 0 answers with an HMAC of both nonces and its answer, so each side knows the other
holds the secret. Every later message carries a sequence number and an HMAC of the sender, both nonces,
that number and the message, so that a message cannot be forged, replayed (in this connection or
another), or sent back to its sender. Anything else (a port scan, a connection that closes or says
nothing, a malformed, oversized, unauthenticated or replayed line) is ignored: it never ends a launch.
"""

# This module is long because the authenticated handshake, the message checks and the liveness watch of the
# control link live together; the layout issue (40) splits poprun by responsibility.

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import queue
import secrets
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from popdist._hosts import split_address

Message = dict[str, Any]

# The variable that gives every host's poprun the launch's secret.
SECRET_VARIABLE = "POPRUN_SECRET"
# A secret shorter than this is refused: it could be guessed.
MIN_SECRET_CHARS = 16
# The longest line a poprun reads; a longer one is skipped whole.
MAX_LINE = 4096
# The longest report text (what failed) passed between hosts.
MAX_TEXT = 1000
# Seconds a connection to host 0 has to prove itself before it is dropped.
HANDSHAKE_S = 10.0
# Unproven connections handled at once; more are closed as they come (a flood cannot exhaust threads).
MAX_PENDING = 32
# Each poprun sends a heartbeat this often, and a peer silent for SILENCE_S is lost.
HEARTBEAT_S = 1.0
SILENCE_S = 10.0
# Seconds a send may block (a peer that stopped reading) before it is given up.
SEND_TIMEOUT_S = 5.0
# Seconds closing waits for the peer to close its side, so that the last messages are not cut off.
CLOSE_S = 2.0
# How often blocking waits look at the clock.
_POLL_S = 0.2


class LaunchError(Exception):
    """The hosts cannot start the launch (they disagree on it, or one of them refused it)."""


@dataclass(frozen=True)
class Lost:
    """A peer's connection ended (`silent_s` None) or it said nothing for `silent_s` seconds."""

    silent_s: float | None = None


# (host, message), or (host, Lost) once that host is gone.
Event = tuple[int, "Message | Lost"]


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


def _mac(key: bytes, *parts: object) -> str:
    # sort_keys and fixed separators: both ends must serialise the same message to the same bytes.
    return hmac.new(key, json.dumps(parts, sort_keys=True, separators=(",", ":")).encode(), hashlib.sha256).hexdigest()


def _nonce() -> str:
    return secrets.token_hex(16)


def _is_nonce(value: object) -> bool:
    return isinstance(value, str) and len(value) == 32 and all(c in "0123456789abcdef" for c in value)


def _is_int(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def valid_report(report: object) -> bool:
    """Whether `report` is what a poprun reports of a failure: {"what": text, "code": exit code}."""
    return (
        isinstance(report, dict)
        and report.keys() == {"what", "code"}
        and isinstance(report["what"], str)
        and len(report["what"]) <= MAX_TEXT
        and _is_int(report["code"], 0, 255)
    )


def _valid_body(body: object, sender: int, me: int) -> bool:
    """Whether `body` is a message that a poprun in `sender`'s place sends to one in `me`'s."""
    if not isinstance(body, dict) or len(body) != 1:
        return False
    kind, value = next(iter(body.items()))
    if kind == "beat":
        return value is True
    if sender == 0:  # host 0 to another host
        return (kind == "finish" and value is True) or (kind == "stop" and valid_report(value))
    if me == 0:  # another host to host 0
        return (kind == "done" and value == sender) or (kind == "failed" and valid_report(value))
    return False


def _keepalive(conn: socket.socket) -> None:
    """Have the kernel probe an idle connection, so that a vanished host is noticed even before a heartbeat."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 5), ("TCP_KEEPINTVL", 2), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):
            with contextlib.suppress(OSError):
                conn.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


class _Conn:
    """A connection to another poprun, read line by line with a bounded line length.

    Reading waits in select(), not in a blocking recv(), so closing from another thread never waits for a
    reader; the socket's own timeout bounds sends only."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        sock.settimeout(SEND_TIMEOUT_S)
        _keepalive(sock)
        self._buffer = bytearray()
        self._skipping = False  # inside a line that grew past MAX_LINE

    def read_line(self, deadline: float) -> bytes | None:
        """The next line of at most MAX_LINE bytes (None once the peer has closed); TimeoutError at `deadline`."""
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                if self._skipping or len(line) > MAX_LINE:
                    self._skipping = False
                    continue
                return line
            if len(self._buffer) > MAX_LINE:
                self._buffer.clear()
                self._skipping = True
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            try:
                readable, _, _ = select.select([self.sock], [], [], min(left, _POLL_S))
                if not readable:
                    continue
                chunk = self.sock.recv(65536)
            except (OSError, ValueError):  # closed here, or reset by the peer
                return None
            if not chunk:
                return None
            self._buffer += chunk

    def read_json(self, deadline: float) -> Message | None:
        """The next line that is a JSON object (others are skipped); None once the peer has closed."""
        while True:
            line = self.read_line(deadline)
            if line is None:
                return None
            message = _parse(line)
            if message is not None:
                return message

    def send(self, message: Message) -> None:
        """Send one line (OSError, TimeoutError included, when it cannot be sent)."""
        self.sock.sendall((json.dumps(message, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def _parse(line: bytes) -> Message | None:
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, or nested too deep for the parser
        return None
    return message if isinstance(message, dict) else None


@dataclass
class _Session:
    """An authenticated connection: the peer's host index and the two nonces of its handshake."""

    conn: _Conn
    host: int
    nonces: tuple[str, str]  # (host 0's, the other host's)
    sent: int = 0
    received: int = 0


class Link:
    """One poprun's authenticated connections to the others (host 0: to every host; the others: to host 0).

    `events` receives each valid message from a peer, and Lost once a peer is gone; heartbeats are sent and
    checked here."""

    def __init__(self, me: int, secret: bytes, sessions: dict[int, _Session], silence_s: float = SILENCE_S) -> None:
        self.events: queue.Queue[Event] = queue.Queue()
        self._me, self._secret, self._sessions, self._silence_s = me, secret, sessions, silence_s
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._followers = [
            threading.Thread(target=self._follow, args=(s,), daemon=True, name=f"poprun-host-{h}")
            for h, s in sessions.items()
        ]
        for thread in self._followers:
            thread.start()
        threading.Thread(target=self._beat, daemon=True, name="poprun-heartbeat").start()

    def _follow(self, session: _Session) -> None:
        heard = time.monotonic()
        while True:
            try:
                line = session.conn.read_line(heard + self._silence_s)
            except TimeoutError:
                self.events.put((session.host, Lost(self._silence_s)))
                return
            if line is None:
                self.events.put((session.host, Lost()))
                return
            body = self._open(session, line)
            if body is None:
                continue  # not a message of this peer's: ignored
            heard = time.monotonic()
            if "beat" not in body:
                self.events.put((session.host, body))

    def _open(self, session: _Session, line: bytes) -> Message | None:
        """The message in `line` if `session`'s peer sent it, in order, and it is one a poprun sends; else None."""
        message = _parse(line)
        if message is None or message.keys() != {"seq", "body", "mac"}:
            return None
        seq, body, mac = message["seq"], message["body"], message["mac"]
        if not _is_int(seq, session.received + 1, 2**62) or not isinstance(mac, str):
            return None
        expected = _mac(self._secret, "message", session.host, session.nonces, seq, body)
        if not hmac.compare_digest(expected, mac) or not _valid_body(body, session.host, self._me):
            return None
        session.received = seq
        return body  # type: ignore[no-any-return]

    def _beat(self) -> None:
        while not self._closed.wait(HEARTBEAT_S):
            self.broadcast({"beat": True})

    def send(self, host: int, body: Message) -> None:
        """Send `body` to `host`; a host already gone is skipped (its loss arrives as an event)."""
        session = self._sessions[host]
        with self._lock:
            session.sent += 1
            signed = {"seq": session.sent, "body": body}
            signed["mac"] = _mac(self._secret, "message", self._me, session.nonces, session.sent, body)
            with contextlib.suppress(OSError):
                session.conn.send(signed)

    def broadcast(self, body: Message, but: int | None = None) -> None:
        """Send `body` to every connected host except `but`."""
        for host in self._sessions:
            if host != but:
                self.send(host, body)

    def close(self) -> None:
        """Close every connection once the peer has read what was sent (waiting at most CLOSE_S)."""
        self._closed.set()
        for session in self._sessions.values():
            # A FIN after the last message; the peer closes its side in turn, which ends its follower here.
            with self._lock, contextlib.suppress(OSError):
                session.conn.sock.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + CLOSE_S
        for thread in self._followers:
            thread.join(max(0.0, deadline - time.monotonic()))
        for session in self._sessions.values():
            session.conn.close()


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

    conn: _Conn
    host: object
    launch: object
    nonces: tuple[str, str]


def _answer(secret: bytes, hello: _Hello, kind: str, value: object) -> None:
    """Host 0's signed answer to a proven hello."""
    with contextlib.suppress(OSError):
        hello.conn.send({kind: value, "mac": _mac(secret, kind, hello.nonces, value)})


def gather(
    bind_host: str,
    port: int,
    num_hosts: int,
    launch: Message,
    jax_address: str,
    timeout: float,
    secret: bytes,
    say: Callable[[str], None] = lambda _: None,
) -> Link:
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

    def handshake(conn: _Conn, peer: str) -> None:
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
        server.settimeout(_POLL_S)
        try:
            while len(joined) < num_hosts - 1:
                if time.monotonic() >= deadline:
                    missing = [str(h) for h in range(1, num_hosts) if h not in joined]
                    shown = ", ".join(missing[:20]) + (f" and {len(missing) - 20} more" if len(missing) > 20 else "")
                    hint = (
                        f"; {dropped[0]} connection(s) did not prove they hold the launch's secret (is "
                        f"{SECRET_VARIABLE} the same on every host?)"
                        if dropped[0]
                        else ""
                    )
                    raise TimeoutError(f"host(s) {shown} did not join within {timeout:g} s at port {port}{hint}")
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
                threading.Thread(target=handshake, args=(_Conn(sock), str(peer[0])), daemon=True).start()
        except BaseException as e:
            for hello in joined.values():
                _answer(secret, hello, "refused", f"host 0's poprun gave up: {e}"[:MAX_TEXT])
                hello.conn.close()
            raise
        finally:
            finished.set()
    for hello in joined.values():
        _answer(secret, hello, "start", {"jax_address": jax_address})
    sessions = {h: _Session(hello.conn, h, hello.nonces) for h, hello in joined.items()}
    return Link(0, secret, sessions)


def _prove(conn: _Conn, secret: bytes, deadline: float) -> _Hello | None:
    """Challenge a new connection; its hello if it proves it holds `secret`, else None."""
    challenge = _nonce()
    try:
        conn.send({"challenge": challenge})
        hello = conn.read_json(deadline)
        if hello is None or hello.keys() != {"hello", "launch", "nonce", "mac"}:
            return None
        nonce, mac = hello["nonce"], hello["mac"]
        if not _is_nonce(nonce) or not isinstance(mac, str):
            return None
        nonces = (challenge, nonce)
        if not hmac.compare_digest(_mac(secret, "hello", nonces, hello["hello"], hello["launch"]), mac):
            return None
    except (OSError, TimeoutError, ValueError, RecursionError):
        return None
    return _Hello(conn, hello["hello"], hello["launch"], nonces)


def _check_hello(hello: _Hello, launch: Message, joined: dict[int, _Hello], num_hosts: int) -> str | None:
    """Why a poprun that proved it holds the secret cannot take part, or None."""
    host = hello.host
    if not _is_int(host, 1, num_hosts - 1):
        return f"a poprun joined as host {str(host)[:50]!r}, which is not one of hosts 1..{num_hosts - 1}"
    if host in joined:
        return f"two poprun joined as host {host}"
    if hello.launch != launch:
        return f"host {host}'s poprun was given another launch: {str(hello.launch)[:500]} (host 0: {launch})"
    return None


def join(address: str, host_index: int, launch: Message, timeout: float, secret: bytes) -> tuple[Link, str]:
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
            time.sleep(_POLL_S)
            continue
        reached = True
        conn = _Conn(sock)
        try:
            answer = _join_once(conn, host_index, launch, deadline, secret)
        except LaunchError:
            conn.close()
            raise
        if answer is not None:
            link, jax_address = answer
            return link, jax_address
        conn.close()
        time.sleep(_POLL_S)
    if not reached:
        raise TimeoutError(f"could not reach host 0's poprun at {address} within {timeout:g} s")
    raise TimeoutError(
        f"host 0's poprun at {address} did not start the launch within {timeout:g} s (other hosts missing, or "
        f"another {SECRET_VARIABLE} there?)"
    )


def _join_once(
    conn: _Conn, host_index: int, launch: Message, deadline: float, secret: bytes
) -> tuple[Link, str] | None:
    """One try at joining through `conn`: the link and JAX's address, or None if the peer did not prove
    itself (or went away); LaunchError if host 0's poprun refused this host."""
    try:
        challenge = conn.read_json(deadline)
        if challenge is None or not _is_nonce(challenge.get("challenge")):
            return None
        nonces = (str(challenge["challenge"]), _nonce())
        mac = _mac(secret, "hello", nonces, host_index, launch)
        conn.send({"hello": host_index, "launch": launch, "nonce": nonces[1], "mac": mac})
        while True:
            answer = conn.read_json(deadline)
            if answer is None:
                return None
            kind = next((k for k in ("start", "refused") if k in answer), None)
            if kind is None or answer.keys() != {kind, "mac"} or not isinstance(answer["mac"], str):
                continue
            if not hmac.compare_digest(_mac(secret, kind, nonces, answer[kind]), answer["mac"]):
                continue
            if kind == "refused":
                raise LaunchError(f"host 0's poprun did not start this host: {str(answer[kind])[:MAX_TEXT]}")
            start = answer[kind]
            if not isinstance(start, dict) or not isinstance(start.get("jax_address"), str):
                return None
            return Link(host_index, secret, {0: _Session(conn, 0, nonces)}), start["jax_address"]
    except (OSError, TimeoutError):
        return None
