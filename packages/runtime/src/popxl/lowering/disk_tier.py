"""Remote buffers on local disk, streamed behind the compute.

A program whose remote buffers live on disk keeps each in a `RemoteFile` of
one folder. Its remote loads and stores call back to the host (in program
order) and meet a `DiskTier`, which moves entries between the files and
a bounded set of staging buffers on a small thread pool:

- a store copies the entry into a staging buffer and returns; the write
  drains behind the compute, and a store waits only when the writes in
  flight would exceed the write staging bound;
- a load is served from a write still in flight (what was stored is what is
  loaded), from a read started earlier, or read there and then;
- the program's loads and stores are taken one at a time, whichever of XLA's
  threads calls them;
- reads start ahead of their loads, along the last run's loads
  (`disk_schedule`), as far as the read staging bound allows.

Staging buffers (`disk_staging`) are the process's only memory for disk-tier
state: the files bypass the page cache. A run marks the files it writes
"dirty" and commits them (checksums, "clean") when it ends, after every write
has reached the disk.
"""

from __future__ import annotations

import collections
import functools
import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from popxl.errors import RemoteFileError
from popxl.lowering.disk_schedule import Key, ReadAheadSchedule
from popxl.lowering.disk_staging import Read, StagingPool
from popxl.lowering.remote_file import RemoteFile, free_bytes
from popxl.remote_buffer import RemoteBuffer

Array = np.ndarray[Any, Any]

# Chooses the folder of the disk tier for every Session that is not given one, as POPXL_CACHE_DIR the cache's.
REMOTE_DIR_VARIABLE = "POPXL_REMOTE_DIR"
# Bytes of staging for reads ahead, and again for writes behind (each), unless a Session says.
STAGING_VARIABLE = "POPXL_REMOTE_STAGING"
DEFAULT_STAGING = 512 * 2**20
# Threads reading ahead and threads writing behind: apart, so that a read the program waits for never queues
# behind writes.
READERS = 4
WRITERS = 2


class RemoteIOEvent(NamedTuple):
    """One timed piece of disk-tier work: `kind` is "read" or "write" (a worker moving an entry between the disk
    and staging), or "load" or "store" (the program asking for one); times are `time.perf_counter()` seconds,
    `nbytes` the entry's bytes (as the file holds them, for reads and writes)."""

    kind: str
    buffer: int
    entry: int
    start: float
    end: float
    nbytes: int


class DiskTier:
    """The files of one program's disk-resident remote buffers in `folder`, and their staging.

    `staging` bounds the bytes read ahead and, again, the bytes written behind.
    """

    def __init__(self, folder: str | os.PathLike[str], staging: int, buffers: Iterable[RemoteBuffer] = ()) -> None:
        self.folder = Path(folder).resolve()
        self.buffers = list(buffers)
        self.staging = staging
        self.files: dict[int, RemoteFile] = {}
        self._layouts: dict[int, RemoteFile] = {}
        self._pool = StagingPool(2 * staging)
        self._executor: ThreadPoolExecutor | None = None
        self._writers: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        # XLA runs callbacks of independent buffers on threads of its own, at once: one at a time here, so that
        # a read started ahead never misses a store under way on another thread (it would read the old entry).
        self._calls = threading.Lock()
        self._reads: collections.OrderedDict[Key, Read] = collections.OrderedDict()
        self._writes: dict[Key, tuple[Array, Future[None]]] = {}
        self._write_order: collections.deque[Key] = collections.deque()
        self._errors: list[BaseException] = []
        self._dirty: set[int] = set()
        self._in_run = False
        self._schedule = ReadAheadSchedule()
        self.events: list[RemoteIOEvent] | None = None

    # -- files ------------------------------------------------------------------------------------------

    def disk_bytes(self) -> int:
        """The bytes the files take on disk."""
        return sum(self._layout(b).size for b in self.buffers)

    def staging_bytes(self) -> int:
        """The most memory the staging buffers take: reads ahead and writes behind, at least one entry each."""
        layouts = [self._layout(b) for b in self.buffers]
        largest = max((f.stride for f in layouts), default=0)
        total = sum(f.entries * f.stride for f in layouts)
        return 2 * min(max(self.staging, largest), total) + largest

    def _layout(self, buffer: RemoteBuffer) -> RemoteFile:
        """The layout a file of `buffer` has (nothing is opened), worked out once: the figures are asked every run."""
        key = buffer.remote_buffer_id
        if key not in self._layouts:
            dtype = np.dtype(buffer.tensor_dtype.as_numpy())
            self._layouts[key] = RemoteFile(Path(), dtype, buffer.tensor_shape, buffer.entries, -1)
        return self._layouts[key]

    def check_space(self) -> None:
        """Raise `RemoteFileError` naming the folder, the bytes needed and free, where the files cannot fit."""
        self.folder.mkdir(parents=True, exist_ok=True)
        existing = sum(f.size for f in self.files.values())
        needed = self.disk_bytes() - existing
        available = free_bytes(self.folder)
        if needed > available:
            raise RemoteFileError(
                f"{self.folder}: the remote buffers on disk need {needed} more bytes there, and {available} are "
                "free: free space, or choose another folder (POPXL_REMOTE_DIR)"
            )

    def open(self, keep: dict[int, set[int]]) -> None:
        """Make the files (once; they are reused later) and zero every entry but those in `keep` by buffer id.
        (Attaching asks `check_space` first, before anything is written.)"""
        self.folder.mkdir(parents=True, exist_ok=True)
        for b in self.buffers:
            file = self.files.get(b.remote_buffer_id)
            if file is None:
                name = f"remote_buffer_{b.remote_buffer_id}.bin"
                path = self.folder / name
                file = RemoteFile.create(path, b.tensor_dtype.as_numpy(), b.tensor_shape, b.entries)
                self.files[b.remote_buffer_id] = file
            file.reset(keep.get(b.remote_buffer_id, set()))
        if self._executor is None:
            self._executor = ThreadPoolExecutor(READERS, thread_name_prefix="popxl-disk-read")
            self._writers = ThreadPoolExecutor(WRITERS, thread_name_prefix="popxl-disk-write")

    def close(self) -> None:
        """Finish what is under way, make the files durable and stop the threads (the files stay). The files of
        a run that did not end (an error) stay marked as being written."""
        self._drain()
        if not self._in_run:
            for file in self.files.values():
                file.commit(durable=True)
        for pool in (self._executor, self._writers):
            if pool is not None:
                pool.shutdown()
        self._executor = self._writers = None
        self._reads.clear()

    def remove(self) -> None:
        """Close, and delete the files."""
        self.close()
        for file in self.files.values():
            file.close()
            file.path.unlink(missing_ok=True)
        self.files.clear()

    # -- runs -------------------------------------------------------------------------------------------

    def begin_run(self) -> None:
        """A run starts: its loads and stores are recorded, reads ahead follow the last run's."""
        self._schedule.begin_run()
        self._in_run = True
        self._prefetch()

    def end_run(self) -> None:
        """A run ended: every write reaches the disk and the files it wrote are committed."""
        self._drain()
        self.commit()
        self._in_run = False
        self._schedule.end_run()
        self._raise_errors()

    def _drain(self) -> None:
        while self._write_order:
            self._wait_write(self._write_order[0])
        with self._lock:
            reads = list(self._reads.values())
            self._reads.clear()
        for read in reads:
            if read.future.exception() is None:
                self._pool.give(read.staging)

    def _raise_errors(self) -> None:
        if self._errors:
            error = self._errors[0]
            self._errors.clear()
            raise error

    # -- entries, from the program (host callbacks) ---------------------------------------------------------

    def load(self, bid: int, index: int) -> Array:
        """Entry `index` of buffer `bid`, for the device: an array the caller may keep."""
        start = time.perf_counter()
        with self._calls:
            value = self._load(bid, index)
        if self.events is not None:
            self.events.append(
                RemoteIOEvent("load", bid, int(index), start, time.perf_counter(), self.files[bid].nbytes)
            )
        return value

    def _load(self, bid: int, index: int) -> Array:
        self._raise_errors()
        key = (bid, int(index))
        file = self.files[bid]
        self._schedule.record("load", key)
        written = self._writes.get(key)
        if written is not None:
            value = file.entry(written[0]).copy()
        else:
            with self._lock:
                read = self._reads.pop(key, None)
            if read is None:
                read = self._start_read(key)
            read.future.result()
            # A copy: XLA may take the array's memory as the loaded value without copying it, and keep it after
            # the array object is gone, so a staging buffer handed over could not be used again safely.
            value = file.entry(read.staging).copy()
            self._pool.give(read.staging)
        self._prefetch()
        return value

    def store(self, bid: int, index: int, value: Array) -> None:
        """Replace entry `index` of buffer `bid` by `value` (written behind; returns once it is staged)."""
        start = time.perf_counter()
        with self._calls:
            self._store(bid, index, value)
        if self.events is not None:
            self.events.append(
                RemoteIOEvent("store", bid, int(index), start, time.perf_counter(), self.files[bid].nbytes)
            )

    def _store(self, bid: int, index: int, value: Array) -> None:
        self._raise_errors()
        key = (bid, int(index))
        file = self.files[bid]
        self._schedule.record("store", key)
        with self._lock:
            stale = self._reads.pop(key, None)
        if stale is not None:  # read before this store: its data is given up once it has landed
            stale.future.add_done_callback(functools.partial(self._give_up, stale.staging))
        if key in self._writes:  # one write of an entry at a time, so that the last one lands last
            self._wait_write(key)
        flat = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
        if bid not in self._dirty:
            file.mark_dirty()
            self._dirty.add(bid)
        # All zero bytes (an accumulator reset): no IO, the entry reads as zeros. Its first bytes settle most.
        if not flat[:4096].any() and not flat.any():
            file.zero(key[1])
            return
        while self._write_order and self._writing_bytes() + file.stride > max(self.staging, file.stride):
            self._wait_write(self._write_order[0])
        staging = self._pool.take(file.stride)
        staging[: flat.size] = flat
        staging[flat.size :] = 0
        assert self._writers is not None
        future = self._writers.submit(self._timed, "write", key, file.write_from, key[1], staging)
        self._writes[key] = (staging, future)
        self._write_order.append(key)
        self._prefetch()  # the reads ahead go on through a run of stores, not only at the next load

    def _give_up(self, staging: Array, _: Future[None]) -> None:
        self._pool.give(staging)

    def _writing_bytes(self) -> int:
        return sum(self.files[k[0]].stride for k in self._writes)

    def _wait_write(self, key: Key) -> None:
        staging, future = self._writes.pop(key)
        self._write_order.remove(key)
        error = future.exception()
        if error is not None:
            self._errors.append(error)
        else:
            self._pool.give(staging)

    # -- reading ahead ------------------------------------------------------------------------------------

    def _prefetch(self) -> None:
        if self._executor is None:
            return
        upcoming = self._schedule.upcoming(lambda bid: self.files[bid].entries)
        wanted = set(upcoming)
        need = self.files[upcoming[0][0]].stride if upcoming else 0
        with self._lock:
            ahead = sum(self.files[k[0]].stride for k in self._reads)
            # Reads the run has gone past are given up for those it needs next.
            for key in [k for k, r in self._reads.items() if k not in wanted and r.future.done()]:
                if ahead + need <= self.staging:
                    break
                ahead -= self.files[key[0]].stride
                self._pool.give(self._reads.pop(key).staging)
        for key in upcoming:
            if key in self._reads or key in self._writes:
                continue
            stride = self.files[key[0]].stride
            if ahead + stride > self.staging:
                break
            read = self._start_read(key)
            with self._lock:
                self._reads[key] = read
            ahead += stride

    def _start_read(self, key: Key) -> Read:
        file = self.files[key[0]]
        staging = self._pool.take(file.stride)
        assert self._executor is not None
        return Read(staging, self._executor.submit(self._timed, "read", key, file.read_into, key[1], staging))

    def _timed(self, kind: str, key: Key, action: Any, index: int, staging: Array) -> None:
        # An entry never written reads as zeros without the disk: no event.
        if self.events is None or (kind == "read" and not self.files[key[0]].written[index]):
            action(index, staging)
            return
        start = time.perf_counter()
        action(index, staging)
        self.events.append(RemoteIOEvent(kind, key[0], key[1], start, time.perf_counter(), self.files[key[0]].stride))

    # -- whole entries, for the Session (variables) ----------------------------------------------------------

    def entry_view(self, bid: int, index: int) -> Array:
        """Entry `index` of buffer `bid` as a read-only view of the file (memory the OS may drop and read again)."""
        self._drain()
        file = self.files[bid]
        if not file.written[index]:
            return np.zeros(file.shape, file.dtype)
        offset = file.data_offset + index * file.stride
        return np.memmap(file.path, file.dtype, "r", offset, file.shape)

    def is_view(self, bid: int, index: int, value: Array) -> bool:
        """Whether `value` is `entry_view(bid, index)` (or a whole view of it): its data is already there."""
        file = self.files[bid]
        base = _map_of(value)
        if base is None or base.filename is None or Path(base.filename) != file.path.resolve():
            return False
        same = base.offset == file.data_offset + index * file.stride and value.nbytes == file.nbytes
        return bool(same and value.ctypes.data == base.ctypes.data and bool(file.written[index]))

    def zero_entry(self, bid: int, index: int) -> None:
        """Make entry `index` of buffer `bid` read as zeros (nothing is written)."""
        self._drain()
        file = self.files[bid]
        if file.written[index] and bid not in self._dirty:
            file.mark_dirty()
            self._dirty.add(bid)
        file.zero(index)

    def holds(self, value: Array) -> bool:
        """Whether `value` is a view of one of this tier's files (which the next run may write)."""
        base = _map_of(value)
        paths = {file.path for file in self.files.values()}
        return base is not None and base.filename is not None and Path(base.filename) in paths

    def commit(self) -> None:
        """Commit the files written by `write_entry(..., commit=False)`."""
        for bid in sorted(self._dirty):
            self.files[bid].commit()
        self._dirty.clear()

    def write_entry(self, bid: int, index: int, value: Array, commit: bool = True) -> None:
        """Replace entry `index` of buffer `bid` by `value` now, and commit the file (or leave it to `commit`)."""
        self._drain()
        file = self.files[bid]
        staging = self._pool.take(file.stride)
        flat = np.ascontiguousarray(value, file.dtype).reshape(-1).view(np.uint8)
        if flat.size != file.nbytes:
            raise ValueError(f"{file.path}: an entry is {file.nbytes} bytes, the value given {flat.size}")
        staging[: flat.size] = flat
        staging[flat.size :] = 0
        if bid not in self._dirty:
            file.mark_dirty()
            self._dirty.add(bid)
        file.write_from(index, staging)
        self._pool.give(staging)
        if commit:
            self.commit()


def remote_dir(asked: str | os.PathLike[str] | None) -> Path | None:
    """The disk tier's folder: as asked, else POPXL_REMOTE_DIR's, else None (no disk tier)."""
    chosen = asked if asked is not None else os.environ.get(REMOTE_DIR_VARIABLE) or None
    return None if chosen is None else Path(chosen)


def staging_bytes(asked: int | None) -> int:
    """The staging bound: as asked, else POPXL_REMOTE_STAGING's, else the default."""
    if asked is not None:
        if asked < 1:
            raise ValueError(f"remote_staging must be a positive number of bytes, got {asked}")
        return asked
    value = os.environ.get(STAGING_VARIABLE)
    if not value:
        return DEFAULT_STAGING
    try:
        parsed = int(value)
    except ValueError:
        parsed = 0
    if parsed < 1:
        raise ValueError(f"{STAGING_VARIABLE} must be a positive number of bytes, got {value!r}")
    return parsed


def _map_of(value: Array) -> np.memmap[Any, Any] | None:
    """The `np.memmap` that `value` is, or is a view of; None for memory of the process's own."""
    base: Any = value
    while base is not None and not isinstance(base, np.memmap):
        base = getattr(base, "base", None)
    return base
