"""Device and host bytes of a compiled program, from where each argument and output lives.

XLA's temp bytes alone do not say what lives where: a remote buffer in pinned
host memory is an argument and an output of the step, not a temporary. So the
figures here sum each argument and output by its memory kind, per device,
subtract what XLA may update in place (donated arguments aliased by an output
of the same shape, dtype and memory), and add XLA's own temp figures.

XLA's temp figure leaves out what a library fusion allocates for itself: on a
CPU, XLA hands whole subgraphs (dots with the adds, reductions and concatenations
around them) to YNNPACK or XNNPACK as one `kCustom` fusion, whose buffer
assignment holds only the fusion's result; the values inside it are allocated by
the library as it runs. Five 8 GiB matmul outputs added together and summed come
to 0 B of temporaries in XLA's figures, and to 24 GiB when run. So each such
fusion's inner values are bounded from their shapes (the largest set of them
alive at once, in the fusion's order) and the largest fusion's bound is added
(`library_temp`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import jax

HOST_KINDS = ("pinned_host", "unpinned_host")


def per_device_bytes(shape: tuple[int, ...], dtype: Any, sharding: jax.sharding.Sharding) -> int:
    """Bytes of one device's shard of an array."""
    return math.prod(sharding.shard_shape(shape)) * jax.numpy.dtype(dtype).itemsize


def memory_of(sharding: jax.sharding.Sharding) -> str:
    """'host' for an array in the devices' host memory, else 'device'."""
    return "host" if sharding.memory_kind in HOST_KINDS else "device"


class Footprint:
    """Bytes per device and memory ('device', 'host') of a compiled program: its arguments, its outputs,
    the outputs that update a donated argument in place, and XLA's temporaries.

    `arguments` are the arrays it was compiled for (any pytree): each counts where
    it lives, even when XLA leaves it out of the executable because nothing reads it.
    """

    def __init__(self, compiled: Any, arguments: Any) -> None:
        self.stats = compiled.memory_analysis()
        infos = jax.tree.leaves(compiled.args_info, is_leaf=lambda x: hasattr(x, "donated"))
        self.arguments: Counter[str] = Counter()
        self.outputs: Counter[str] = Counter()
        self.aliased: Counter[str] = Counter()
        donated: Counter[tuple[Any, ...]] = Counter()
        for info, array in zip(infos, jax.tree.leaves(arguments), strict=True):
            memory = memory_of(array.sharding)
            self.arguments[memory] += per_device_bytes(array.shape, array.dtype, array.sharding)
            if info.donated:
                donated[(tuple(array.shape), str(array.dtype), memory)] += 1
        for out in jax.tree.leaves(compiled.out_info):
            size = per_device_bytes(out.shape, out.dtype, out.sharding)
            memory = memory_of(out.sharding)
            self.outputs[memory] += size
            key = (tuple(out.shape), str(out.dtype), memory)
            if donated[key]:
                donated[key] -= 1
                self.aliased[memory] += size
        self.temp = {"device": int(self.stats.temp_size_in_bytes), "host": int(self.stats.host_temp_size_in_bytes)}
        # What library fusions allocate outside XLA's buffers: a fusion runs on the device that runs the step.
        # Only XLA:CPU makes them (a GPU's custom fusions are kernels whose values XLA's buffers hold).
        leaves = jax.tree.leaves(arguments)
        on_cpu = not leaves or any(d.platform == "cpu" for d in leaves[0].sharding.device_set)
        self.library = library_peak(compiled.as_text()) if on_cpu else LibraryPeak()
        self.temp["device"] += self.library.nbytes

    def allocations(self) -> dict[str, int]:
        """What a run allocates beyond its arguments, per memory: temporaries and outputs not updated in place."""
        return {m: self.outputs[m] - self.aliased[m] + self.temp[m] for m in ("device", "host")}

    def figures(self) -> dict[str, int]:
        """XLA's figures with `device_bytes` and `host_bytes`: all the program holds in each memory as it runs."""
        held = {m: self.arguments[m] + n for m, n in self.allocations().items()}
        return {
            "temp": self.temp["device"] - self.library.nbytes,
            "library_temp": self.library.nbytes,
            "argument": int(self.stats.argument_size_in_bytes),
            "output": int(self.stats.output_size_in_bytes),
            "alias": int(self.stats.alias_size_in_bytes),
            "code": int(self.stats.generated_code_size_in_bytes),
            "host_temp": self.temp["host"],
            "device_bytes": held["device"],
            "host_bytes": held["host"],
        }


def memory_figures(compiled: Any, arguments: Any) -> dict[str, int]:
    """XLA's figures for `compiled` (bytes per device) with `device_bytes` and `host_bytes` added."""
    return Footprint(compiled, arguments).figures()


# ---------------------------------------------------------------------------------------------- library fusions

_DEFINITION = re.compile(r"^\s*(ROOT\s+)?%([\w.\-]+)\s*=\s*(\S+?)\s+([\w\-]+)\((.*)$")
_ARRAY = re.compile(r"^(\w+)\[([\d,]*)\]")
_HEADER = re.compile(r"^(?:ENTRY\s+)?%([\w.\-]+)\s.*\{\s*$")
_REFERENCE = re.compile(r"(?<![=\w])%([\w.\-]+)")
_CALLED = re.compile(r"calls=%([\w.\-]+)")
_LIBRARY_KIND = re.compile(r'"kind":"(__(?:ynn|xnn|onednn)\w*)"')
_OP_NAME = re.compile(r'op_name="([^"]*)"')
# Instructions that hold no bytes of their own inside a fusion: its inputs, views of another value, constants.
_VIEWS = {"bitcast", "reshape", "get-tuple-element", "tuple", "broadcast", "slice"}
_NO_BYTES = {"parameter", "constant", "iota", "after-all"}
_ELEMENTWISE = {
    *("abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "convert", "cosine", "divide", "erf"),
    *("exponential", "exponential-minus-one", "floor", "imag", "is-finite", "log", "log-plus-one", "logistic"),
    *("maximum", "minimum", "multiply", "negate", "not", "or", "popcnt", "power", "real", "reduce-precision"),
    *("remainder", "round-nearest-afz", "round-nearest-even", "rsqrt", "select", "shift-left", "sign", "sine"),
    *("shift-right-arithmetic", "shift-right-logical", "sqrt", "subtract", "tan", "tanh", "xor"),
}
_ITEMSIZE = {"pred": 1, "s4": 1, "u4": 1, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1, "f8e4m3b11fnuz": 1}
_ITEMSIZE |= {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16}
_ITEMSIZE |= {f"{k}{n}": n // 8 for k in "su" for n in (8, 16, 32, 64)}


@dataclass(frozen=True)
class LibraryPeak:
    """The most bytes a library fusion of a program holds at once, which fusion, and its largest inner value."""

    nbytes: int = 0
    fusion: str = ""
    largest: str = ""
    largest_bytes: int = 0
    op_name: str = ""


def hlo_array_bytes(shape: str) -> int | None:
    """Bytes of an HLO array type such as `f32[4096,16]{1,0}`; None for a tuple or an unknown element type."""
    match = _ARRAY.match(shape)
    if match is None or match.group(1) not in _ITEMSIZE:
        return None
    return math.prod(int(d) for d in match.group(2).split(",") if d) * _ITEMSIZE[match.group(1)]


def library_peak(hlo: str) -> LibraryPeak:
    """The largest of a compiled program's library fusions (`kind=kCustom`, run by YNNPACK, XNNPACK or
    oneDNN) by the bytes its inner values hold at their peak, taking the fusions to run one at a time."""
    if "kind=kCustom" not in hlo or _LIBRARY_KIND.search(hlo) is None:
        return LibraryPeak()
    bodies: dict[str, list[str]] = {}
    libraries: list[tuple[str, str]] = []  # (fusion instruction, its computation)
    current: list[str] | None = None
    for line in hlo.splitlines():
        header = _HEADER.match(line)
        if header:
            current = bodies.setdefault(header.group(1), [])
            continue
        if current is None:
            continue
        current.append(line)
        if "kind=kCustom" in line and _LIBRARY_KIND.search(line):
            called, defined = _CALLED.search(line), _DEFINITION.match(line)
            if called and defined:
                libraries.append((defined.group(2), called.group(1)))
    peaks = [_peak(fusion, bodies.get(body, [])) for fusion, body in libraries]
    return max(peaks, key=lambda p: p.nbytes, default=LibraryPeak())


def _peak(fusion: str, lines: list[str]) -> LibraryPeak:
    """The peak of one fusion's inner values, in its instructions' order.

    Each value the library holds in memory counts from the instruction that makes it to the last that reads
    it: what every op but an elementwise one makes, and an elementwise op of such a value (elementwise ops of
    the fusion's inputs alone are computed within their reader). Views (bitcasts, reshapes, broadcasts,
    slices) extend the value they view; inputs, constants and results (XLA's own buffers) count nothing.
    """
    owner: dict[str, str] = {}  # each value to the value whose bytes it uses (itself, or the one it views)
    made: list[tuple[str, int, str]] = []  # per instruction: the value it makes, its bytes, its op name
    last: dict[str, int] = {}
    results: set[str] = set()
    material: set[str] = set()
    for index, match in enumerate(m for m in map(_DEFINITION.match, lines) if m is not None):
        root, name, shape, opcode, rest = match.groups()
        operands = [owner[o] for o in _REFERENCE.findall(rest) if o in owner]
        for operand in operands:
            last[operand] = index
        owner[name] = operands[0] if opcode in _VIEWS and operands else name
        if root:
            results |= set(operands) if opcode == "tuple" else {owner[name]}
        # The library computes elementwise ops of its inputs within the op that reads them; any other op, or an
        # elementwise op of a value it made, makes a value in memory.
        made_here = owner[name] == name and opcode not in _NO_BYTES
        if opcode in _ELEMENTWISE and not any(o in material for o in operands):
            made_here = False
        if made_here:
            material.add(name)
        nbytes = hlo_array_bytes(shape) if made_here else None
        scope = _OP_NAME.search(rest)
        made.append((name, nbytes or 0, scope.group(1) if scope else ""))
        last[name] = index
    # The results (or the values they view) are the fusion's outputs: XLA's buffers.
    made = [(n, 0 if n in results else b, o) for n, b, o in made]
    ends: dict[int, list[int]] = {}
    for name, nbytes, _ in made:
        if nbytes:
            ends.setdefault(last[name], []).append(nbytes)
    live = peak = 0
    for index, (_, nbytes, _) in enumerate(made):
        live += nbytes
        peak = max(peak, live)
        live -= sum(ends.get(index, []))
    name, nbytes, op_name = max(made, key=lambda m: m[1], default=("", 0, ""))
    return LibraryPeak(peak, fusion, name, nbytes, op_name)
