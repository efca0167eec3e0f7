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


def _per_device_bytes(shape: tuple[int, ...], dtype: Any, sharding: jax.sharding.Sharding) -> int:
    return math.prod(sharding.shard_shape(shape)) * jax.numpy.dtype(dtype).itemsize


def _kind(sharding: jax.sharding.Sharding) -> str:
    return "host" if sharding.memory_kind in HOST_KINDS else "device"


def memory_figures(compiled: Any, arguments: Any) -> dict[str, int]:
    """XLA's figures for `compiled` (bytes per device) with `device_bytes` and `host_bytes` added.

    `arguments` are the arrays it was compiled for (any pytree): each counts where
    it lives, even when XLA leaves it out of the executable because nothing reads it.
    """
    stats = compiled.memory_analysis()
    infos = jax.tree.leaves(compiled.args_info, is_leaf=lambda x: hasattr(x, "donated"))
    arrays = jax.tree.leaves(arguments)
    outs = jax.tree.leaves(compiled.out_info)
    totals: Counter[str] = Counter()
    donated: Counter[tuple[Any, ...]] = Counter()
    for info, array in zip(infos, arrays, strict=True):
        sharding = array.sharding
        size = _per_device_bytes(array.shape, array.dtype, sharding)
        totals[_kind(sharding)] += size
        if info.donated:
            donated[(tuple(array.shape), str(array.dtype), _kind(sharding))] += 1
    aliased: Counter[str] = Counter()
    for out in outs:
        size = _per_device_bytes(out.shape, out.dtype, out.sharding)
        kind = _kind(out.sharding)
        totals[kind] += size
        key = (tuple(out.shape), str(out.dtype), kind)
        if donated[key]:
            donated[key] -= 1
            aliased[kind] += size
    return {
        "temp": int(stats.temp_size_in_bytes),
        "argument": int(stats.argument_size_in_bytes),
        "output": int(stats.output_size_in_bytes),
        "alias": int(stats.alias_size_in_bytes),
        "code": int(stats.generated_code_size_in_bytes),
        "host_temp": int(stats.host_temp_size_in_bytes),
        "device_bytes": totals["device"] - aliased["device"] + int(stats.temp_size_in_bytes),
        "host_bytes": totals["host"] - aliased["host"] + int(stats.host_temp_size_in_bytes),
    }
