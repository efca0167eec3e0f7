"""poprun's output: the instances' lines copied to its stdout and stderr, tagged, and poprun's own lines."""

from __future__ import annotations

import collections
import sys
import threading
import time
from typing import IO

# Lines of a hidden instance's output shown if it fails.
HIDDEN_TAIL_LINES = 20


class Output:
    """Copies the instances' lines to poprun's stdout and stderr, tagged; keeps hidden instances' last lines."""

    def __init__(self, shown: int | None, verbose: int = 0) -> None:
        self.shown = shown
        self.verbose = verbose
        self.lock = threading.Lock()
        self.hidden: dict[int, collections.deque[str]] = {}
        self.threads: list[threading.Thread] = []

    def follow(self, index: int, stream_name: str, pipe: IO[bytes], sink: IO[str]) -> None:
        """Copy instance `index`'s lines from `pipe` to `sink`, tagged, or keep its last ones if it is hidden."""
        visible = self.shown is None or self.shown == index
        tail = self.hidden.setdefault(index, collections.deque(maxlen=HIDDEN_TAIL_LINES))
        prefix = f"[1,{index}]<{stream_name}>:"
        thread = threading.Thread(target=self._copy, args=(pipe, prefix, sink, visible, tail), daemon=True)
        thread.start()
        self.threads.append(thread)

    def _copy(self, pipe: IO[bytes], prefix: str, sink: IO[str], visible: bool, tail: collections.deque[str]) -> None:
        with pipe:
            for raw in iter(pipe.readline, b""):
                line = prefix + raw.decode("utf-8", errors="replace").rstrip("\r\n") + "\n"
                if visible:
                    with self.lock:
                        sink.write(line)
                        sink.flush()
                else:
                    tail.append(line)

    def relay(self, pipe: IO[bytes], sink: IO[str]) -> None:
        """Copy a launcher's own lines (mpirun's) as they are, whichever instance is shown."""
        thread = threading.Thread(target=self._copy, args=(pipe, "", sink, True, collections.deque()), daemon=True)
        thread.start()
        self.threads.append(thread)

    def drain(self, timeout: float) -> None:
        """Wait, at most `timeout` seconds, for the copying to reach the end of every pipe."""
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def say(self, message: str, verbose: bool = False) -> None:
        """Write `message` as poprun's own line on stderr (when `verbose`, only with -v)."""
        if verbose and not self.verbose:
            return
        with self.lock:
            sys.stdout.flush()
            sys.stderr.write(f"poprun: {message}\n")
            sys.stderr.flush()
