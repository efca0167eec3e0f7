"""The authenticated link between the `poprun`s of one launch, once `popdist._control` has joined them.

Messages are JSON objects, one a line of at most MAX_LINE bytes. Every message carries a sequence number
and an HMAC-SHA256, under the launch's secret, of the sender, the two nonces of its connection's handshake,
that number and the message, so that a message cannot be forged, replayed (in this connection or
another), or sent back to its sender. Each poprun sends a heartbeat every HEARTBEAT_S; a connection that
closes, or a peer that says nothing for SILENCE_S seconds, is reported lost. Any other line (malformed,
oversized, unauthenticated or replayed) is ignored: it never ends a launch.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import queue
import secrets
import select
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]

# The longest line a poprun reads; a longer one is skipped whole.
MAX_LINE = 4096
# The longest report text (what failed) passed between hosts.
MAX_TEXT = 1000
# Each poprun sends a heartbeat this often, and a peer silent for SILENCE_S is lost.
HEARTBEAT_S = 1.0
SILENCE_S = 10.0
# Seconds a send may block (a peer that stopped reading) before it is given up.
SEND_TIMEOUT_S = 5.0
# Seconds closing waits for the peer to close its side, so that the last messages are not cut off.
CLOSE_S = 2.0
# How often blocking waits look at the clock.
POLL_S = 0.2


@dataclass(frozen=True)
class Lost:
    """A peer's connection ended (`silent_s` None) or it said nothing for `silent_s` seconds."""

    silent_s: float | None = None


# (host, message), or (host, Lost) once that host is gone.
Event = tuple[int, "Message | Lost"]


def sign(key: bytes, *parts: object) -> str:
    """The HMAC-SHA256 of `parts` under `key`, as hex."""
    # sort_keys and fixed separators: both ends must serialise the same message to the same bytes.
    return hmac.new(key, json.dumps(parts, sort_keys=True, separators=(",", ":")).encode(), hashlib.sha256).hexdigest()


def new_nonce() -> str:
    """A fresh random nonce for a handshake (128 bits, as hex)."""
    return secrets.token_hex(16)


def is_nonce(value: object) -> bool:
    """Whether `value` is a nonce as `new_nonce` makes them."""
    return isinstance(value, str) and len(value) == 32 and all(c in "0123456789abcdef" for c in value)


def is_int(value: object, low: int, high: int) -> bool:
    """Whether `value` is an int (not a bool) from `low` to `high`."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def valid_report(report: object) -> bool:
    """Whether `report` is what a poprun reports of a failure: {"what": text, "code": exit code}."""
    return (
        isinstance(report, dict)
        and report.keys() == {"what", "code"}
        and isinstance(report["what"], str)
        and len(report["what"]) <= MAX_TEXT
        and is_int(report["code"], 0, 255)
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


class Conn:
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
                readable, _, _ = select.select([self.sock], [], [], min(left, POLL_S))
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
        """Close the socket."""
        with contextlib.suppress(OSError):
            self.sock.close()


def _parse(line: bytes) -> Message | None:
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, or nested too deep for the parser
        return None
    return message if isinstance(message, dict) else None


@dataclass
class Session:
    """An authenticated connection: the peer's host index and the two nonces of its handshake."""

    conn: Conn
    host: int
    nonces: tuple[str, str]  # (host 0's, the other host's)
    sent: int = 0
    received: int = 0


class Link:
    """One poprun's authenticated connections to the others (host 0: to every host; the others: to host 0).

    `events` receives each valid message from a peer, and Lost once a peer is gone; heartbeats are sent and
    checked here."""

    def __init__(self, me: int, secret: bytes, sessions: dict[int, Session], silence_s: float = SILENCE_S) -> None:
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

    def _follow(self, session: Session) -> None:
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

    def _open(self, session: Session, line: bytes) -> Message | None:
        """The message in `line` if `session`'s peer sent it, in order, and it is one a poprun sends; else None."""
        message = _parse(line)
        if message is None or message.keys() != {"seq", "body", "mac"}:
            return None
        seq, body, mac = message["seq"], message["body"], message["mac"]
        if not is_int(seq, session.received + 1, 2**62) or not isinstance(mac, str):
            return None
        expected = sign(self._secret, "message", session.host, session.nonces, seq, body)
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
            signed["mac"] = sign(self._secret, "message", self._me, session.nonces, session.sent, body)
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
