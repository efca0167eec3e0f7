"""Whether a compiled program fits the memory the machine has, checked before anything runs.

A program too large for memory must end with one clear error, never a kill by
the OS: on a CPU, XLA takes its temporaries from the process's memory and the
OS kills the process once the pages are touched; on a GPU, XLA raises its own
`RESOURCE_EXHAUSTED`. So before a Session attaches (allocating its state) and
before each run, the bytes it is about to allocate are compared with what is
available:

- a run allocates XLA's temporaries and every output that does not update a
  donated argument in place, per memory (device, host);
- attaching allocates the state (variables, remote buffers) where it lives.

What is available: on a GPU, the device's free bytes as XLA reports them; for
host memory (and a CPU device, whose memory is host memory), the tightest of
what the OS makes available (`MemAvailable`), what the process's memory cgroups
still allow (v2's `memory.max`, else v1's `memory.limit_in_bytes`, less usage),
both shared between the instances a launch runs on this host, and what the
process's own limits leave (`RLIMIT_AS`, `ulimit -v`, less its address space;
`RLIMIT_DATA`, `ulimit -d`, less its data). Where none can be read, nothing is
checked. `POPXL_MEMORY_CHECK=0` turns every check off (for machines that swap,
say), the planner's included.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import resource
import textwrap
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax

from popxl.errors import OutOfMemoryError
from popxl.lowering.memory import LibraryPeak, library_peak, memory_of, per_device_bytes
from popxl.units import format_bytes

CHECK_VARIABLE = "POPXL_MEMORY_CHECK"
# How many of the largest buffers an error names.
_NAMED = 5


@dataclass(frozen=True)
class Buffer:
    """One named buffer a program holds or allocates: what it is, its bytes per device and its memory."""

    name: str
    nbytes: int
    memory: str

    @classmethod
    def of_array(cls, name: str, array: jax.Array) -> Buffer:
        """A device array as a named buffer."""
        return cls(name, per_device_bytes(array.shape, array.dtype, array.sharding), memory_of(array.sharding))


# ---------------------------------------------------------------------------------------------- availability


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().split()[0]
    except (OSError, IndexError):
        return None
    return int(text) if text.isdigit() else None


# Where the OS's figures are read (tests point them at stand-ins).
PROC = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _cgroup_available() -> int | None:
    """Bytes the process's memory cgroups (v2 and v1) still allow at their tightest level, or None where none
    limits."""
    try:
        lines = (PROC / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    root = CGROUP_ROOT
    found: list[int] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: the unified hierarchy (in a hybrid layout, mounted at unified/)
            base = root / "unified" if (root / "unified" / "cgroup.controllers").exists() else root
            names = ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            base, names = root / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        for folder in _levels(base, Path(path.lstrip("/"))):
            limit, usage = _read_int(folder / names[0]), _read_int(folder / names[1])
            if limit is not None and usage is not None and limit < 1 << 60:
                found.append(max(0, limit - usage + _reclaimable(folder)))
    return min(found) if found else None


def _levels(base: Path, path: Path) -> list[Path]:
    """The folders of a cgroup and its ancestors up to the mount. A container often mounts its own cgroup
    as the root while /proc/self/cgroup names it from the host's: the longest tail of `path` that exists
    below `base` is taken as the process's."""
    parts = path.parts
    for start in range(len(parts) + 1):
        if (base / Path(*parts[start:])).is_dir():
            tail = parts[start:]
            return [base / Path(*tail[:n]) for n in range(len(tail), -1, -1)]
    return [base]


def _reclaimable(folder: Path) -> int:
    """The cgroup's inactive file cache, which its usage counts but the kernel reclaims before it kills."""
    try:
        stat = dict(line.split() for line in (folder / "memory.stat").read_text().splitlines())
    except (OSError, ValueError):
        return 0
    for key in ("total_inactive_file", "inactive_file"):
        if stat.get(key, "").isdigit():
            return int(stat[key])
    return 0


def _status_bytes(field: str) -> int | None:
    """A `kB` field of /proc/self/status (VmSize, VmData), in bytes."""
    try:
        status = (PROC / "self" / "status").read_text()
    except OSError:
        return None
    found = re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else None


def _rlimit_available(limit: int, field: str) -> int | None:
    """What a process limit (its soft limit) leaves beyond the process's use as /proc counts it against it."""
    soft, _ = resource.getrlimit(limit)
    if soft == resource.RLIM_INFINITY:
        return None
    used = _status_bytes(field)
    return None if used is None else max(0, soft - used)


def local_instances() -> int:
    """How many instances of a `poprun` launch share this host (1 outside a launch), from popdist's variables
    (see docs/runtime.md: the first host of several may count more than it holds, never fewer)."""

    def read(name: str, default: int) -> int:
        text = os.environ.get(name, "").strip()
        return int(text) if text.isdigit() else default

    explicit = read("POPDIST_NUM_LOCAL_INSTANCES", 0)
    if explicit > 0:
        return explicit
    count = read("POPDIST_NUM_INSTANCES", 1)
    index, local = read("POPDIST_INSTANCE_INDEX", 0), read("POPDIST_LOCAL_INSTANCE_INDEX", 0)
    first = index - local
    if count <= 1 or first < 0:
        return max(count, 1)
    fitting = [n for n in range(local + 1, count + 1) if count % n == 0 and first % n == 0]
    return max(fitting, default=count)


def host_limits() -> dict[str, int]:
    """The room each limit on host memory leaves this process, in bytes, by what sets it (those set and
    readable): `MemAvailable` and the cgroups' room, shared by a launch's instances on this host, and what
    `RLIMIT_AS` and `RLIMIT_DATA` leave."""
    limits: dict[str, int] = {}
    try:
        meminfo = (PROC / "meminfo").read_text()
    except OSError:
        meminfo = ""
    found = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo, re.MULTILINE)
    shared = local_instances()
    share = f", a 1/{shared} share: this host runs {shared} instances of the launch" if shared > 1 else ""
    if found:
        limits[f"MemAvailable{share}"] = int(found.group(1)) * 1024 // shared
    cgroup = _cgroup_available()
    if cgroup is not None:
        limits[f"the cgroup's memory limit{share}"] = cgroup // shared
    for limit, field, name in (
        (resource.RLIMIT_AS, "VmSize", "RLIMIT_AS (ulimit -v) less the address space in use"),
        (resource.RLIMIT_DATA, "VmData", "RLIMIT_DATA (ulimit -d) less the data in use"),
    ):
        room = _rlimit_available(limit, field)
        if room is not None:
            limits[name] = room
    return limits


# The limit that set the last figure `host_available` gave: (bytes, what sets it), for the error to name.
_binding: tuple[int, str] = (-1, "")


def host_available() -> int | None:
    """Bytes of host memory this process can still allocate without the OS killing it or an allocation failing
    (the tightest of `host_limits()`), or None if unknown."""
    global _binding
    limits = host_limits()
    if not limits:
        return None
    name = min(limits, key=lambda k: limits[k])
    _binding = (limits[name], name)
    return limits[name]


# Reading the OS's figures takes about 0.1 ms, a large share of a small program's run: a reading under a second
# old stands for a request of at most this share of it (a larger one reads them again).
_FRESH_SECONDS = 1.0
_SMALL_SHARE = 1 / 16
_reading: tuple[float, int | None] = (-math.inf, None)


def _host_available_for(need: int) -> int | None:
    """`host_available()`, read again unless a recent reading comfortably covers `need` bytes."""
    global _reading
    read_at, value = _reading
    now = time.monotonic()
    if value is None or now - read_at > _FRESH_SECONDS or need > _SMALL_SHARE * value:
        value = host_available()
        _reading = (now, value)
    return value


def forget_reading() -> None:
    """Make the next check read the OS's figures again."""
    global _reading
    _reading = (-math.inf, None)


def give_back_freed_memory() -> None:
    """Return to the OS the pages the C allocator keeps free (glibc's `malloc_trim`; nothing elsewhere).

    Freed arrays under glibc's mmap threshold (up to 32 MiB) stay in the process's heap, resident and counted
    as used: after the state moves to the devices (or back), the host values it leaves would otherwise still
    hold the memory that the checks and the OS see as taken.
    """
    if _malloc_trim is not None:
        _malloc_trim(0)
        forget_reading()


def _find_malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None


_malloc_trim = _find_malloc_trim()


def device_available(device: Any) -> int | None:
    """Free bytes of an accelerator's own memory as XLA reports them; None for a CPU or where unreported."""
    if device.platform == "cpu":
        return None
    stats = device.memory_stats() or {}
    if "bytes_limit" not in stats:
        return None
    return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))


def check_enabled() -> bool:
    """Whether programs are checked against the machine's memory before they run."""
    return os.environ.get(CHECK_VARIABLE, "1").strip().lower() not in ("0", "false", "no", "off")


# ---------------------------------------------------------------------------------------------- the check


Held = Callable[[], Iterable[Buffer]]


def require_fit(what: str, device: Any, allocations: dict[str, int], held: Held, advice: str, devices: int = 1) -> None:
    """Raise `OutOfMemoryError` if `allocations` (new bytes per memory, on each of this process's `devices`
    devices alike) exceed what `device`'s machine has.

    `held()` lists the buffers involved, of which the message names the largest; `advice` says what to change.
    """
    if not check_enabled():
        return
    short, available = _shortfall(device, allocations, devices)
    if short and _malloc_trim is not None:
        # What earlier runs freed may still be resident in the heap, counted as used: given back, it counts.
        give_back_freed_memory()
        short, available = _shortfall(device, allocations, devices)
    if short:
        message = out_of_memory_message(what, device, allocations, available, held, advice, devices=devices)
        raise OutOfMemoryError(message)


def _shortfall(device: Any, allocations: dict[str, int], devices: int) -> tuple[bool, int | None]:
    """Whether a memory is short of `allocations` on each of `devices` devices, and the bytes available in it."""
    if device.platform == "cpu":
        # A CPU device's memory is the host's: every device's allocations, in both memories, come from it.
        need = devices * sum(allocations.values())
        host = _host_available_for(need)
        return host is not None and need > host, host
    on_device = device_available(device)
    if on_device is not None and allocations.get("device", 0) > on_device:
        return True, on_device
    host = _host_available_for(devices * allocations.get("host", 0))
    return host is not None and devices * allocations.get("host", 0) > host, host


def out_of_memory_message(
    what: str,
    device: Any,
    allocations: dict[str, int],
    available: int | None,
    held: Held,
    advice: str,
    outcome: str = "Nothing was run or changed.",
    devices: int = 1,
) -> str:
    """The one error a program that does not fit gets: needed and available bytes, its largest buffers, advice."""
    parts = " and ".join(f"{format_bytes(b)} of {m} memory" for m, b in allocations.items() if b)
    if devices > 1:
        parts = f"{parts or '0 B'} on each of its {devices} devices"
    where = "this machine" if device.platform == "cpu" else f"{device}"
    have = "an unknown amount" if available is None else format_bytes(available)
    binding = available is not None and available == _binding[0]
    why = f" ({_binding[1]})" if binding else ""
    if binding and _binding[1].startswith("RLIMIT"):
        where = "this process"  # its own limit, not the machine's memory
    lines = textwrap.wrap(f"{what} would allocate {parts or '0 B'}, but {where} has {have} available{why}. {outcome}")
    largest = sorted(held(), key=lambda b: b.nbytes, reverse=True)[:_NAMED]
    if largest:
        lines.append("Largest buffers:")
        lines += [f"  {format_bytes(b.nbytes):>9}  {b.memory:<6}  {b.name}" for b in largest]
    return "\n".join([*lines, *textwrap.wrap(advice)])


# ---------------------------------------------------------------------------------------------- XLA's buffers

_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%\S+\s*=\s*(\w+)\[([\d,]*)\][^=]*?\s(\S+?)\(")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%(\S+)\s.*\{\s*$")
_CALLS = re.compile(r"calls=%([\w.\-]+)")
_NOT_ALLOCATED = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "copy-start", "copy-done"}


def largest_temporaries(hlo: str, count: int = _NAMED) -> list[Buffer]:
    """The largest values a compiled program's HLO computes outside fusions, named by the popxl op behind them.

    XLA reports its temporaries as one figure; the values named here are what
    they hold (each once, though a loop reuses its body's).
    """
    fused = set(_CALLS.findall(hlo))
    found: dict[str, Buffer] = {}
    computation = ""
    for line in hlo.splitlines():
        header = _COMPUTATION.match(line)
        if header:
            computation = header.group(1)
            continue
        match = _INSTRUCTION.match(line)
        if match is None or computation in fused or match.group(3) in _NOT_ALLOCATED:
            continue
        dtype, dims, _ = match.groups()
        try:
            itemsize = jax.numpy.dtype(_HLO_DTYPES.get(dtype, dtype)).itemsize
        except TypeError:
            continue
        nbytes = math.prod(int(d) for d in dims.split(",") if d) * itemsize
        op_name = _OP_NAME.search(line)
        name = _scope(op_name.group(1)) if op_name else ""
        key = name or f"{dtype}[{dims}]"
        if key not in found or found[key].nbytes < nbytes:
            found[key] = Buffer(f"{key} {dtype}[{dims}] (computed)", nbytes, "device")
    library = library_peak(hlo)
    if library.nbytes:
        found[library.fusion] = _library_buffer(library)
    return sorted(found.values(), key=lambda b: b.nbytes, reverse=True)[:count]


def _library_buffer(library: LibraryPeak) -> Buffer:
    """What a library fusion holds at its peak (allocated by the library, outside XLA's buffers), as one buffer
    named by its largest value."""
    name = _scope(library.op_name) or library.largest
    return Buffer(f"{name} and more, in library fusion {library.fusion}", library.nbytes, "device")


_HLO_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "f64": "float64", "pred": "bool"}
_HLO_DTYPES |= {f"s{n}": f"int{n}" for n in (8, 16, 32, 64)} | {f"u{n}": f"uint{n}" for n in (8, 16, 32, 64)}


def _scope(op_name: str) -> str:
    """The popxl scopes of an XLA op name: its path less JAX's own parts and the primitive."""
    parts = [p for p in op_name.split("/")[:-1] if "(" not in p and p not in ("while", "body", "cond")]
    return "/".join(parts)
