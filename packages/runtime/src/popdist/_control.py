"""How the `poprun`s of several hosts start and stop one launch together.

Host 0's poprun listens at the launch's address (host:port). Every other host's poprun connects there,
says which host it is and what launch it was given (hosts, instances, replicas), and waits. Once every
host has joined with the same launch, host 0 names the address of JAX's coordinator (which instance 0
runs, on host 0, at a port free there) and each poprun starts its instances. While they run, a poprun
tells host 0 of an instance that failed, or that all of its instances succeeded; host 0 then tells
every poprun to stop (saying what failed and the exit code to pass on) or that the launch is finished.
A connection that closes before that counts as a failure of that host's poprun.

Messages are JSON objects, one a line. The link is not authenticated: like JAX's coordinator it is
for a cluster's private network.
"""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
import time
from typing import Any

from popdist._hosts import split_address

Message = dict[str, Any]
# (host, message), or (host, None) once that host's connection has closed.
Event = tuple[int, Message | None]


class LaunchError(Exception):
    """The hosts cannot start the launch (they disagree on it, or one of them refused it)."""


def _send(conn: socket.socket, message: Message) -> None:
    conn.sendall((json.dumps(message) + "\n").encode())


class _Peer:
    """A connection to another poprun, read line by line (the reader keeps what arrived after a line)."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.lines = conn.makefile("rb")

    def read(self, deadline: float) -> Message | None:
        """One message before `deadline` (None if the connection closed); TimeoutError after it."""
        self.conn.settimeout(max(0.01, deadline - time.monotonic()))
        line = self.lines.readline()
        if not line:
            return None
        message = json.loads(line)
        if not isinstance(message, dict):
            raise LaunchError(f"unexpected message {message!r}")
        return message

    def close(self) -> None:
        self.lines.close()
        self.conn.close()


class Link:
    """One poprun's connections to the others (host 0: to every host; the others: to host 0)."""

    def __init__(self, peers: dict[int, _Peer]) -> None:
        self.events: queue.Queue[Event] = queue.Queue()
        self._peers = peers
        self._lock = threading.Lock()
        for host, peer in peers.items():
            peer.conn.settimeout(None)
            threading.Thread(target=self._follow, args=(host, peer), daemon=True).start()

    def _follow(self, host: int, peer: _Peer) -> None:
        with contextlib.suppress(OSError, ValueError):
            for line in peer.lines:
                message = json.loads(line)
                if isinstance(message, dict):
                    self.events.put((host, message))
        self.events.put((host, None))

    def send(self, host: int, message: Message) -> None:
        """Send `message` to `host`; a host already gone is skipped (its closing arrives as an event)."""
        with self._lock, contextlib.suppress(OSError):
            _send(self._peers[host].conn, message)

    def broadcast(self, message: Message, but: int | None = None) -> None:
        """Send `message` to every connected host except `but`."""
        for host in self._peers:
            if host != but:
                self.send(host, message)

    def close(self) -> None:
        """Close every connection (after what was sent has gone)."""
        for peer in self._peers.values():
            with contextlib.suppress(OSError):
                peer.conn.shutdown(socket.SHUT_WR)
            peer.close()


def gather(port: int, num_hosts: int, launch: Message, jax_address: str, timeout: float) -> Link:
    """On host 0: wait for every other host's poprun to join `launch`, then send them `jax_address`.

    TimeoutError names the hosts that had not joined after `timeout` seconds; LaunchError, a host that
    joined with another launch (every joined host is then told to stop)."""
    deadline = time.monotonic() + timeout
    joined: dict[int, _Peer] = {}
    try:
        server = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
    except (OSError, ValueError):
        server = socket.create_server(("", port))
    with server:
        try:
            while len(joined) < num_hosts - 1:
                server.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    conn = _Peer(server.accept()[0])
                except TimeoutError:
                    missing = [str(h) for h in range(1, num_hosts) if h not in joined]
                    raise TimeoutError(
                        f"host(s) {', '.join(missing)} did not join within {timeout:g} s at port {port}"
                    ) from None
                try:
                    hello = conn.read(min(deadline, time.monotonic() + 5.0))
                except (OSError, ValueError, LaunchError):
                    conn.close()  # not a poprun: ignore it
                    continue
                host = hello.get("hello") if hello else None
                problem = _check_hello(host, hello, launch, joined, num_hosts)
                if problem is not None:
                    with contextlib.suppress(OSError):
                        _send(conn.conn, {"refused": problem})
                    conn.close()
                    raise LaunchError(problem)
                assert isinstance(host, int)
                joined[host] = conn
        except BaseException as e:
            for peer in joined.values():
                with contextlib.suppress(OSError):
                    _send(peer.conn, {"refused": f"host 0's poprun gave up: {e}"})
                peer.close()
            raise
    for peer in joined.values():
        _send(peer.conn, {"start": {"jax_address": jax_address}})
    return Link(joined)


def _check_hello(
    host: object, hello: Message | None, launch: Message, joined: dict[int, _Peer], num_hosts: int
) -> str | None:
    """Why a joining poprun cannot take part, or None."""
    if not isinstance(host, int) or isinstance(host, bool) or not 0 < host < num_hosts:
        return f"a poprun joined as host {host!r}, which is not one of hosts 1..{num_hosts - 1}"
    if host in joined:
        return f"two poprun joined as host {host}"
    theirs = hello.get("launch") if hello else None
    if theirs != launch:
        return f"host {host}'s poprun was given another launch: {theirs} (host 0: {launch})"
    return None


def join(address: str, host_index: int, launch: Message, timeout: float) -> tuple[Link, str]:
    """On another host: join host 0's poprun at `address`; returns the link and JAX's coordinator address.

    TimeoutError if host 0's poprun cannot be reached, or does not start the launch, within `timeout`
    seconds; LaunchError if it refuses this host."""
    host, port = split_address(address)
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn = _Peer(
                socket.create_connection((host, port), timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            )
            break
        except OSError:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"could not reach host 0's poprun at {address} within {timeout:g} s") from None
            time.sleep(0.2)
    try:
        _send(conn.conn, {"hello": host_index, "launch": launch})
        answer = conn.read(deadline)
    except TimeoutError:
        conn.close()
        raise TimeoutError(
            f"host 0's poprun at {address} did not start the launch within {timeout:g} s (other hosts missing?)"
        ) from None
    except (OSError, ValueError, LaunchError) as e:
        conn.close()
        raise LaunchError(f"lost contact with host 0's poprun at {address} while joining: {e}") from None
    if answer is None or "start" not in answer:
        conn.close()
        why = answer.get("refused") if answer else "it closed the connection"
        raise LaunchError(f"host 0's poprun at {address} did not start this host: {why}")
    return Link({0: conn}), str(answer["start"]["jax_address"])
