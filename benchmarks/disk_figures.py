"""Figures of the disk tier: the disk's own sequential bandwidth, the bytes the OS moved, and a step's timeline."""

from __future__ import annotations

import json
import mmap
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BLOCK = 64 * 2**20


def disk_bandwidth(folder: Path, nbytes: int = 2 * 2**30) -> dict[str, float]:
    """Sequential write then read bandwidth of `folder`'s disk, bytes per second, as `dd` with O_DIRECT measures
    it: `nbytes` in 64 MiB blocks, past the page cache, the write made durable before its clock stops."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "bandwidth.probe"
    buffer = mmap.mmap(-1, BLOCK)
    buffer.write(os.urandom(1 << 20) * (BLOCK >> 20))
    flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_DIRECT", 0)
    fd = os.open(path, flags, 0o600)
    try:
        blocks = max(1, nbytes // BLOCK)
        start = time.perf_counter()
        for k in range(blocks):
            os.pwritev(fd, [buffer], k * BLOCK)
        os.fsync(fd)
        write = blocks * BLOCK / (time.perf_counter() - start)
        start = time.perf_counter()
        for k in range(blocks):
            os.preadv(fd, [buffer], k * BLOCK)
        read = blocks * BLOCK / (time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return {"read_bytes_per_s": read, "write_bytes_per_s": write, "probe_bytes": float(blocks * BLOCK)}


def io_counters() -> dict[str, int]:
    """This process's bytes read from and written to storage so far, as the OS counts them (`/proc/self/io`;
    zeros where the OS has no such file)."""
    counters = {"read_bytes": 0, "write_bytes": 0}
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return counters
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in counters:
            counters[name] = int(value)
    return counters


LANES = {"load": "program: load", "store": "program: store", "read": "disk: reads", "write": "disk: writes"}


def timeline(events: Sequence[Sequence[Any]], start: float, end: float) -> dict[str, list[tuple[float, float]]]:
    """A step's spans per lane, in seconds from its start: the disk tier's events, and the program's compute
    (the step's time outside its loads and stores)."""
    lanes: dict[str, list[tuple[float, float]]] = {lane: [] for lane in ("compute", *LANES.values())}
    for kind, _, _, begin, finish, *_ in events:
        lanes[LANES[kind]].append((begin - start, finish - start))
    waits = sorted(lanes[LANES["load"]] + lanes[LANES["store"]])
    cursor = 0.0
    for begin, finish in waits:
        if begin > cursor:
            lanes["compute"].append((cursor, begin))
        cursor = max(cursor, finish)
    if end - start > cursor:
        lanes["compute"].append((cursor, end - start))
    return lanes


def tier_bytes(events: Sequence[Sequence[Any]]) -> dict[str, int]:
    """Bytes per kind of disk-tier event: what the program loaded and stored, what the disk read and wrote."""
    totals = dict.fromkeys(LANES, 0)
    for kind, _, _, _, _, nbytes in events:
        totals[kind] += nbytes
    return totals


def write_trace(lanes: dict[str, list[tuple[float, float]]], path: Path) -> Path:
    """`lanes` as a Chrome trace (JSON that Perfetto and chrome://tracing open), one thread per lane."""
    trace = [
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": t, "args": {"name": lane}} for t, lane in enumerate(lanes)
    ]
    for t, (lane, spans) in enumerate(lanes.items()):
        for begin, finish in spans:
            trace.append(
                {"name": lane, "ph": "X", "pid": 1, "tid": t, "ts": begin * 1e6, "dur": (finish - begin) * 1e6}
            )
    path.write_text(json.dumps({"traceEvents": trace, "displayTimeUnit": "ms"}))
    return path


def _busiest(lanes: dict[str, list[tuple[float, float]]], width: float) -> tuple[float, float]:
    """The window of `width` seconds holding the most disk-tier events (where the overlap is to be seen)."""
    starts = sorted(b for lane, spans in lanes.items() if lane != "compute" for b, _ in spans)
    if not starts:
        return 0.0, width
    best, count, j = starts[0], 0, 0
    for i, begin in enumerate(starts):
        while starts[j] < begin - width:
            j += 1
        if i - j + 1 > count:
            best, count = begin - width, i - j + 1
    return max(best, 0.0), max(best, 0.0) + width


def plot_timeline(lanes: dict[str, list[tuple[float, float]]], title: str, path: Path) -> Path:
    """`lanes` drawn as bars on one time axis (PNG): the whole step, and below it the busiest 2 % of it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = max((f for spans in lanes.values() for _, f in spans), default=1.0)
    window = _busiest(lanes, max(end / 50, 1e-3))
    fig, axes = plt.subplots(2, 1, figsize=(12, 5.6))
    colours = ["tab:green", "tab:blue", "tab:orange", "tab:cyan", "tab:red"]
    for ax, (lo, hi) in zip(axes, [(0.0, end), window]):
        for row, spans in enumerate(lanes.values()):
            bars = [(b, max(f - b, (hi - lo) / 2000)) for b, f in spans if f >= lo and b <= hi]
            ax.broken_barh(bars, (row - 0.4, 0.8), color=colours[row % 5])
        ax.set_xlim(lo, hi)
        ax.set_yticks(range(len(lanes)), list(lanes))
        ax.invert_yaxis()
    axes[0].set_title(title)
    axes[1].set_title(f"the busiest {window[1] - window[0]:.2f} s of it, where loads, stores and the disk overlap")
    axes[1].set_xlabel("seconds from the step's start")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
