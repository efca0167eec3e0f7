"""Device and host bytes of a compiled program, from where each argument and output lives.

XLA's temp bytes alone do not say what lives where: a remote buffer in pinned
host memory is an argument and an output of the step, not a temporary. So the
figures here sum each argument and output by its memory kind, per device,
subtract what XLA may update in place (donated arguments aliased by an output
of the same shape, dtype and memory), and add XLA's own temp figures.
"""

from __future__ import annotations

import math
from collections import Counter
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

    def allocations(self) -> dict[str, int]:
        """What a run allocates beyond its arguments, per memory: temporaries and outputs not updated in place."""
        return {m: self.outputs[m] - self.aliased[m] + self.temp[m] for m in ("device", "host")}

    def figures(self) -> dict[str, int]:
        """XLA's figures with `device_bytes` and `host_bytes`: all the program holds in each memory as it runs."""
        held = {m: self.arguments[m] + n for m, n in self.allocations().items()}
        return {
            "temp": self.temp["device"],
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
