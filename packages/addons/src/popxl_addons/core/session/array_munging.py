"""Host-side NumPy helpers that lay data out for replicas: shards, repeats and tensor-parallel feeds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

__all__ = [
    "shard",
    "unshard_arrays",
    "unshard",
    "repeat",
    "repeat_axis",
    "split2D",
    "shard2D",
    "unshard2D",
    "repeat_shard",
    "tensor_parallel_input",
    "pad_axis",
    "squeeze_safe",
    "handle_negative_axis",
    "tensor_parallel_output",
]

Array = np.ndarray[Any, Any]


def handle_negative_axis(x: Array, axis: int) -> int:
    """`axis` of `x` as a non-negative index, or an IndexError."""
    if x.ndim == 0:
        raise IndexError("Array is 0-dimensional")
    if not -x.ndim <= axis < x.ndim:
        raise IndexError(f"Axis is out of range. Axis: {axis}. Array Rank: {x.ndim}")
    return axis % x.ndim


def shard(x: Array, n: int, axis: int) -> Array:
    """`x` cut into `n` equal parts along `axis`, stacked on a new first axis."""
    axis = handle_negative_axis(x, axis)
    return np.stack(np.split(x, n, axis=axis))


def unshard_arrays(xs: Sequence[Array], axis: int) -> Array:
    """Arrays with a leading axis of 1 joined along `axis` (counted without that leading axis), which is dropped."""
    if len({x.ndim for x in xs}) > 1:
        raise ValueError(f"All arrays must be of the same rank. Ranks: {', '.join(str(x.ndim) for x in xs)}")
    axis = axis + 1 if axis >= 0 else handle_negative_axis(xs[0], axis)
    return np.concatenate(list(xs), axis=axis).squeeze(0)


def unshard(x: Array, axis: int) -> Array:
    """The inverse of `shard`: the parts along the first axis joined along `axis`."""
    return unshard_arrays(np.split(x, x.shape[0], axis=0), axis)


def repeat(x: Array, n: int, axis: int = 0) -> Array:
    """`n` copies of `x` stacked along a new axis at `axis`."""
    return np.repeat(np.expand_dims(x, axis), n, axis=axis)


def repeat_axis(x: Array, n: int, axis: int = 0) -> Array:
    """`x` tiled `n` times along its existing `axis`."""
    reps = [1] * x.ndim
    reps[axis] = n
    return np.tile(x, reps)


def split2D(x: Array, n_1: int, n_2: int, axis_1: int, axis_2: int) -> list[list[Array]]:
    """`x` cut into `n_1` parts along `axis_1`, each cut into `n_2` parts along `axis_2`."""
    return [np.split(part, n_2, axis_2) for part in np.split(x, n_1, axis_1)]


def shard2D(x: Array, n_1: int, n_2: int, axis_1: int, axis_2: int) -> Array:
    """`x` cut along two axes (`axis_1` outermost), the `n_1 * n_2` parts stacked on a new first axis."""
    return np.stack([part for row in split2D(x, n_1, n_2, axis_1, axis_2) for part in row])


def unshard2D(x: Array, n_1: int, n_2: int, axis_1: int, axis_2: int) -> Array:
    """The inverse of `shard2D`."""
    if x.shape[0] != n_1 * n_2:
        raise ValueError(f"unshard2D: the first axis has {x.shape[0]} parts, expected {n_1} x {n_2}")
    parts = np.split(x, x.shape[0], axis=0)
    rows = [unshard_arrays(parts[i * n_2 : (i + 1) * n_2], axis_2) for i in range(n_1)]
    return np.concatenate(rows, axis=axis_1)


def repeat_shard(
    x: Array,
    n_repeats: int,
    n_shards: int,
    shard_axis: int,
    sharded_tensor: Literal["contiguous", "strided"] = "contiguous",
) -> Array:
    """`x`'s `n_shards` shards along `shard_axis`, repeated `n_repeats` times.

    "contiguous" gives the shards in order, repeated as a block; "strided"
    gives each shard `n_repeats` times in a row.
    """
    shards = shard(x, n_shards, shard_axis)
    tiled = repeat_axis(shards, n_repeats, 0)
    if sharded_tensor == "contiguous":
        return tiled
    if sharded_tensor == "strided":
        rest = shards.shape[1:]
        return tiled.reshape(n_repeats, n_shards, *rest).swapaxes(0, 1).reshape(n_shards * n_repeats, *rest)
    raise ValueError(f"sharded_tensor should be either 'contiguous' or 'strided'. Not: {sharded_tensor}")


def squeeze_safe(x: Array, axis: int | Sequence[int] | None = None) -> Array:
    """`x` without those of `axis` (or of all its axes) that have size 1; other axes are left alone."""
    if axis is None:
        return np.squeeze(x)
    axes = [axis] if isinstance(axis, int) else list(axis)
    for ax in sorted({handle_negative_axis(x, a) for a in axes}, reverse=True):
        if x.shape[ax] == 1:
            x = np.squeeze(x, axis=ax)
    return x


def pad_axis(x: Array, n: int, axis: int, value: float = 0) -> Array:
    """`x` padded with `value` to length `n` along `axis`."""
    if x.shape[axis] > n:
        raise ValueError(f"pad_axis: axis {axis} has length {x.shape[axis]} > {n}")
    padding = [(0, 0)] * x.ndim
    padding[axis] = (0, n - x.shape[axis])
    return np.pad(x, padding, constant_values=value)


def _check_tp(tp: int, rf: int) -> None:
    if tp > rf:
        raise ValueError(f"tensor parallel factor `tp` is not less than replication factor `rf`: {tp} > {rf}")
    if rf % tp:
        raise ValueError(f"tensor parallel factor `tp` does not equally divide replication factor `rf`: {rf}/{tp}")


def tensor_parallel_input(
    input_data: Array, tp: int, rf: int, repeat_fn: Callable[[Array, int], Array] | None = None
) -> Array:
    """`[n, *shape]` data laid out as `[transfers, replicas, *shape]`, each group of `tp` consecutive replicas
    seeing the same sample (replica i of a group its copy through `repeat_fn(copy, i)` when given);
    axes of size 1 among the first two are squeezed."""
    _check_tp(tp, rf)
    data = np.expand_dims(input_data, axis=1)
    copies = [repeat_fn(data.copy(), i) if repeat_fn else data for i in range(tp)]
    laid_out = np.concatenate(copies, axis=1).reshape(-1, rf, *input_data.shape[1:])
    return squeeze_safe(laid_out, [0, 1])


def tensor_parallel_output(
    output_data: Array,
    num_host_transfers: int,
    tp: int,
    rf: int,
    data_shape: tuple[int, ...],
    tp_identical: bool = True,
    true_num_host_transfers: int | None = None,
) -> Array:
    """Session output `[transfers, replicas, *shape]` as `[samples, *shape]` (or `[samples, tp, *shape]`)."""
    _check_tp(tp, rf)
    data = output_data.reshape(num_host_transfers, rf // tp, tp, *data_shape)
    if true_num_host_transfers is not None:
        data = data[:true_num_host_transfers]
    data = data.reshape(-1, tp, *data_shape)
    return data[:, 0] if tp_identical else data
