"""A remote buffer's entries in a file on local disk: its format, and positional reads and writes of one entry.

The file is one header block, a checksum table and the entries:

- the header (`BLOCK` bytes): a magic string and a JSON object with the format
  `version`, the entries' `dtype` (NumPy's name) and `shape`, the number of
  `entries`, each entry's `stride` in the file, the checksum `chunk`, and the
  `state`: "clean" once a run has finished writing, "dirty" while one may be
  writing (so a file left by a process killed mid-run is refused, not read);
- the table: one CRC-32 per chunk of every entry, and a flag per entry saying
  whether it was ever written since the file was reset (an unwritten entry
  reads as zeros, without touching the disk);
- the entries, each at a multiple of `BLOCK`, padded with zeros to its stride.

Reads and writes bypass the page cache (`O_DIRECT`, where the file system has
it), so that the process's memory holds only the staging buffers given to
them, and the bytes moved are the disk's. Their buffers come from
`aligned_buffer`, whose memory `O_DIRECT` accepts. Space for every entry is
allocated when the file is made, so that a full disk is found then, before
any state changes, never in the middle of a run.
"""

from __future__ import annotations

import functools
import json
import math
import mmap
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from popxl.errors import RemoteFileError

Array = np.ndarray[Any, Any]

MAGIC = b"POPXL-REMOTE-BUFFER\n"
VERSION = 1
# The alignment O_DIRECT needs of offsets, lengths and memory on every Linux file system in use.
BLOCK = 4096
CHUNK = 8 * 2**20
_TABLE_DTYPE = np.dtype("<u4")


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def aligned_buffer(nbytes: int) -> Array:
    """`nbytes` of zeroed, page-aligned memory as a uint8 array (an anonymous map, freed with the array)."""
    region = mmap.mmap(-1, max(BLOCK, _round_up(nbytes, BLOCK)))
    return np.frombuffer(region, np.uint8)[:nbytes]


def free_bytes(folder: str | os.PathLike[str]) -> int:
    """The bytes an unprivileged process may still write in `folder`'s file system."""
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


class RemoteFile:
    """The file of one remote buffer: `entries` entries of `dtype` and `shape`."""

    def __init__(self, path: Path, dtype: np.dtype[Any], shape: tuple[int, ...], entries: int, fd: int) -> None:
        self.path = path
        self.dtype = dtype
        self.shape = shape
        self.entries = entries
        self.nbytes = math.prod(shape) * dtype.itemsize
        self.stride = _round_up(max(self.nbytes, 1), BLOCK)
        self.chunks = -(-self.stride // CHUNK)
        table = entries * (self.chunks * _TABLE_DTYPE.itemsize + 1)
        self.table_offset = BLOCK
        self.data_offset = BLOCK + _round_up(table, BLOCK)
        self.size = self.data_offset + entries * self.stride
        self._fd = fd
        self.checksums = np.zeros((entries, self.chunks), _TABLE_DTYPE)
        self.written = np.zeros(entries, np.bool_)
        self._zero_sums = [_zero_sum(self._chunk_length(k)) for k in range(self.chunks)]
        self.checksums[:] = self._zero_sums

    # -- making and opening ------------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | os.PathLike[str], dtype: Any, shape: tuple[int, ...], entries: int) -> RemoteFile:
        """A new file at `path` (replacing any), its space allocated and every entry zero.

        Refused with `RemoteFileError` naming the file and the bytes needed where the disk has too little room.
        """
        target = Path(path)
        dtype = np.dtype(dtype)
        if entries < 1 or any(d < 0 for d in shape):
            raise ValueError(f"{target}: a remote buffer file needs entries >= 1 and a shape of sizes >= 0")
        probe = cls(target, dtype, tuple(shape), entries, -1)
        folder = target.parent
        folder.mkdir(parents=True, exist_ok=True)
        existing = target.stat().st_size if target.exists() else 0
        available = free_bytes(folder) + existing
        if probe.size > available:
            raise RemoteFileError(
                f"{target}: the remote buffer needs {probe.size} bytes on disk ({entries} entries of {dtype} "
                f"{tuple(shape)}), and {folder} has {available} bytes free: free space there, or choose another "
                "folder (POPXL_REMOTE_DIR)"
            )
        fd = _open(target, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        try:
            os.posix_fallocate(fd, 0, probe.size)
        except OSError as e:
            os.close(fd)
            target.unlink(missing_ok=True)
            raise RemoteFileError(
                f"{target}: could not allocate the {probe.size} bytes the remote buffer needs on disk ({e})"
            ) from e
        made = cls(target, dtype, tuple(shape), entries, fd)
        made.commit(durable=True)
        return made

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], dtype: Any = None, shape: tuple[int, ...] | None = None, entries: int = 0
    ) -> RemoteFile:
        """The existing file at `path`, checked: its format version, and its dtype, shape and entries where given.

        Refused with `RemoteFileError` naming the file and what differs; a file that a run was writing when its
        process stopped is refused too. The file is never extended or cut.
        """
        target = Path(path)
        try:
            with open(target, "rb") as f:
                head = f.read(BLOCK)
        except OSError as e:
            raise RemoteFileError(f"{target}: cannot read a remote buffer file ({e})") from e
        header = _parse_header(target, head)
        found = (np.dtype(header["dtype"]), tuple(header["shape"]), int(header["entries"]))
        wanted = (None if dtype is None else np.dtype(dtype), shape if shape is None else tuple(shape), entries or None)
        for what, want, have in zip(("dtype", "shape", "entries"), wanted, found):
            if want is not None and want != have:
                raise RemoteFileError(f"{target}: the file holds {what} {have}, expected {want}; it is left as it is")
        if header["state"] != "clean":
            raise RemoteFileError(
                f"{target}: a run was writing this file when its process stopped, so its entries may be half "
                "written; load the state from a checkpoint instead"
            )
        made = cls(target, found[0], found[1], found[2], -1)
        if header["stride"] != made.stride or header["chunk"] != CHUNK:
            raise RemoteFileError(f"{target}: its layout (stride, chunk) is not this version's; it is left as it is")
        actual = target.stat().st_size
        if actual != made.size:
            raise RemoteFileError(f"{target}: the file has {actual} bytes, its header says {made.size}")
        made._fd = _open(target, os.O_RDWR)
        table = np.frombuffer(made._pread(made.table_offset, made.data_offset - made.table_offset), np.uint8)
        sums = made.entries * made.chunks * _TABLE_DTYPE.itemsize
        made.checksums[:] = table[:sums].view(_TABLE_DTYPE).reshape(made.entries, made.chunks)
        made.written[:] = table[sums : sums + made.entries].astype(np.bool_)
        return made

    def close(self) -> None:
        """Close the file (it stays on disk)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # -- the header and table ---------------------------------------------------------------------------

    def _header(self, state: str) -> bytes:
        fields = {
            "version": VERSION,
            "dtype": self.dtype.str,
            "shape": list(self.shape),
            "entries": self.entries,
            "stride": self.stride,
            "chunk": CHUNK,
            "state": state,
        }
        head = MAGIC + json.dumps(fields).encode() + b"\n"
        return head.ljust(BLOCK, b"\0")

    def mark_dirty(self) -> None:
        """Say in the header that entries are being written (until `commit`)."""
        self._pwrite_bytes(0, self._header("dirty"))

    def commit(self, durable: bool = False) -> None:
        """Write the checksum table and say in the header that the file is clean; with `durable`, flush the
        disk's own cache too (what a process that is killed has written directly is on the disk already: this
        is for power loss)."""
        table = np.zeros(self.data_offset - self.table_offset, np.uint8)
        sums = self.checksums.reshape(-1).view(np.uint8)
        table[: sums.size] = sums
        table[sums.size : sums.size + self.entries] = self.written
        self._pwrite_bytes(self.table_offset, table.tobytes())
        self._pwrite_bytes(0, self._header("clean"))
        if durable:
            os.fdatasync(self._fd)

    def reset(self, keep: set[int] | frozenset[int] = frozenset()) -> None:
        """Make every entry but those in `keep` read as zeros again (nothing is written to them)."""
        for i in range(self.entries):
            if i not in keep:
                self.zero(i)

    def zero(self, index: int) -> None:
        """Make entry `index` read as zeros (nothing is written to it)."""
        self._check_index(index)
        self.written[index] = False
        self.checksums[index] = self._zero_sums

    # -- entries ----------------------------------------------------------------------------------------

    def _chunk_length(self, k: int) -> int:
        return min(CHUNK, self.stride - k * CHUNK)

    def _check_index(self, index: int) -> None:
        if not 0 <= index < self.entries:
            raise IndexError(f"{self.path}: entry {index} is out of range [0, {self.entries})")

    def read_into(self, index: int, staging: Array) -> None:
        """Read entry `index` into `staging` (an `aligned_buffer` of at least `stride` bytes), checking it."""
        self._check_index(index)
        if not self.written[index]:
            staging[: self.stride] = 0
            return
        view = memoryview(staging[: self.stride])  # type: ignore[arg-type]
        offset = self.data_offset + index * self.stride
        done = 0
        while done < self.stride:
            try:
                n = os.preadv(self._fd, [view[done:]], offset + done)
            except OSError as e:
                raise RemoteFileError(f"{self.path}: reading entry {index} failed ({e})") from e
            if n == 0:
                raise RemoteFileError(f"{self.path}: entry {index} ends early, at byte {done} of {self.stride}")
            done += n
        for k in range(self.chunks):
            start = k * CHUNK
            if zlib.crc32(view[start : start + self._chunk_length(k)]) != self.checksums[index, k]:
                raise RemoteFileError(
                    f"{self.path}: entry {index} does not match its checksum at bytes {start}.."
                    f"{start + self._chunk_length(k)}: the file was changed or the disk returned bad data"
                )

    def write_from(self, index: int, staging: Array) -> None:
        """Write entry `index` from `staging` (an `aligned_buffer` of `stride` bytes, zero past `nbytes`)."""
        self._check_index(index)
        view = memoryview(staging[: self.stride])  # type: ignore[arg-type]
        sums = [zlib.crc32(view[k * CHUNK : k * CHUNK + self._chunk_length(k)]) for k in range(self.chunks)]
        offset = self.data_offset + index * self.stride
        done = 0
        while done < self.stride:
            try:
                done += os.pwritev(self._fd, [view[done:]], offset + done)
            except OSError as e:
                raise RemoteFileError(
                    f"{self.path}: writing entry {index} ({self.stride} bytes at byte {offset}) failed ({e})"
                ) from e
        self.checksums[index] = sums
        self.written[index] = True

    def entry(self, staging: Array) -> Array:
        """An entry read into `staging`, as an array of the file's dtype and shape over its first bytes."""
        return staging[: self.nbytes].view(self.dtype).reshape(self.shape)

    # -- small reads and writes of the header and table ---------------------------------------------------

    def _pread(self, offset: int, length: int) -> bytes:
        staging = aligned_buffer(length)
        view = memoryview(staging)  # type: ignore[arg-type]
        if os.preadv(self._fd, [view], offset) != length:
            raise RemoteFileError(f"{self.path}: the file ends before its table does")
        return bytes(view)

    def _pwrite_bytes(self, offset: int, data: bytes) -> None:
        staging = aligned_buffer(len(data))
        staging[:] = np.frombuffer(data, np.uint8)
        try:
            os.pwritev(self._fd, [memoryview(staging)], offset)  # type: ignore[arg-type]
        except OSError as e:
            raise RemoteFileError(f"{self.path}: writing its header failed ({e})") from e


@functools.cache
def _zero_sum(length: int) -> int:
    """The CRC-32 of `length` zero bytes (what an entry never written holds)."""
    return zlib.crc32(bytes(length))


def _open(path: Path, flags: int) -> int:
    """`path` opened for direct IO where its file system has it (tmpfs has not), else through the page cache."""
    direct = getattr(os, "O_DIRECT", 0)
    try:
        return os.open(path, flags | direct, 0o600)
    except OSError:
        if not direct:
            raise
    return os.open(path, flags, 0o600)


def _parse_header(path: Path, head: bytes) -> dict[str, Any]:
    if not head.startswith(MAGIC):
        raise RemoteFileError(f"{path}: not a remote buffer file (no {MAGIC!r} header); it is left as it is")
    try:
        fields = json.loads(head[len(MAGIC) :].split(b"\n", 1)[0])
    except ValueError as e:
        raise RemoteFileError(f"{path}: its header is not readable ({e})") from e
    keys = {"version", "dtype", "shape", "entries", "stride", "chunk", "state"}
    if not isinstance(fields, dict) or not keys <= fields.keys():
        raise RemoteFileError(f"{path}: its header lacks {sorted(keys - set(fields))}")
    if fields["version"] != VERSION:
        raise RemoteFileError(
            f"{path}: format version {fields['version']}, and this popxl reads version {VERSION}; it is left as it is"
        )
    return fields
