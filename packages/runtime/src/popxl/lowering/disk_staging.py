"""The disk tier's staging: aligned host buffers that entries move through between the files and the program."""

from __future__ import annotations

import collections
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np

from popxl.lowering.remote_file import aligned_buffer

Array = np.ndarray[Any, Any]


class Read:
    """A read of one entry under way or done, into its staging buffer."""

    def __init__(self, staging: Array, future: Future[None]) -> None:
        self.staging = staging
        self.future = future


class StagingPool:
    """Reusable aligned staging buffers by size, keeping at most `keep` bytes of idle ones."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.idle: dict[int, list[Array]] = collections.defaultdict(list)
        self.idle_bytes = 0
        self.lock = threading.Lock()

    def take(self, nbytes: int) -> Array:
        """A staging buffer of `nbytes`, an idle one where there is one."""
        with self.lock:
            free = self.idle[nbytes]
            if free:
                self.idle_bytes -= nbytes
                return free.pop()
        return aligned_buffer(nbytes)

    def give(self, staging: Array) -> None:
        """`staging` is no longer used: kept for reuse, or freed where the idle ones would pass the bound."""
        with self.lock:
            if self.idle_bytes + staging.size <= self.keep:
                self.idle[staging.size].append(staging)
                self.idle_bytes += staging.size
