"""Reductions, softmax, normalisation (group norm, batch norm for inference) and histograms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from popxl import dtypes
from popxl.op import Attrs, OpDef, register
from popxl.opdefs.common import axis_in, like_input, same_dtype, vjp_grad
from popxl.tensor import TensorSpec


def _reduce_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    rank = len(specs[0].shape)
    axis = attrs["axis"]
    if axis is None:
        return {**attrs, "axis": tuple(range(rank))}
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    for a in axes:
        if not -rank <= a < rank:
            raise ValueError(f"Axis {a} is out of range for a tensor of rank {rank}")
    return {**attrs, "axis": tuple(sorted({a % rank for a in axes}))}


def _reduce_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    (s,) = specs
    axes = attrs["axis"]
    if attrs["keepdims"]:
        shape = tuple(1 if i in axes else d for i, d in enumerate(s.shape))
    else:
        shape = tuple(d for i, d in enumerate(s.shape) if i not in axes)
    return [TensorSpec(shape, s.dtype)]


def _reduction(name: str, fn: Any, linear: bool) -> OpDef:
    return register(
        OpDef(
            name,
            _reduce_infer,
            lambda ctx, attrs, x: [fn(x, axis=attrs["axis"], keepdims=attrs["keepdims"])],
            grad=vjp_grad(linear=linear),
            normalise=_reduce_normalise,
        )
    )


def _median(x: jax.Array, axis: tuple[int, ...], keepdims: bool) -> jax.Array:
    # popart's median is the lower middle element when an even number of elements is reduced.
    rest = [a for a in range(x.ndim) if a not in axis]
    moved = jnp.transpose(x, (*rest, *axis)).reshape(*(x.shape[a] for a in rest), -1)
    n = moved.shape[-1]
    picked = jnp.sort(moved, axis=-1)[..., (n - 1) // 2]
    if keepdims:
        return picked.reshape(tuple(1 if a in axis else d for a, d in enumerate(x.shape)))
    return picked


REDUCE_SUM = _reduction("reduce_sum", jnp.sum, linear=True)
REDUCE_MEAN = _reduction("reduce_mean", jnp.mean, linear=True)
REDUCE_MAX = _reduction("reduce_max", jnp.max, linear=False)
REDUCE_MIN = _reduction("reduce_min", jnp.min, linear=False)
REDUCE_PROD = _reduction("reduce_prod", jnp.prod, linear=False)
REDUCE_L1 = _reduction("reduce_l1", lambda x, axis, keepdims: jnp.sum(jnp.abs(x), axis, keepdims=keepdims), False)
REDUCE_L2 = _reduction("reduce_l2", lambda x, axis, keepdims: jnp.sqrt(jnp.sum(x * x, axis, keepdims=keepdims)), False)
REDUCE_LOG_SUM = _reduction(
    "reduce_log_sum", lambda x, axis, keepdims: jnp.log(jnp.sum(x, axis, keepdims=keepdims)), False
)
REDUCE_MEDIAN = _reduction("reduce_median", _median, linear=False)


def _cumsum_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    return {**attrs, "dim": axis_in("cumsum", attrs["dim"], len(specs[0].shape))}


CUMSUM = register(
    OpDef(
        "cumsum",
        like_input(0),
        lambda ctx, attrs, x: [jnp.cumsum(x, axis=attrs["dim"], dtype=x.dtype)],
        grad=vjp_grad(linear=True),
        normalise=_cumsum_normalise,
    )
)


SOFTMAX = register(
    OpDef(
        "softmax",
        like_input(0),
        lambda ctx, attrs, x: [jax.nn.softmax(x, axis=attrs["axis"])],
        grad=vjp_grad(),
        normalise=lambda specs, attrs: {**attrs, "axis": axis_in("softmax", attrs["axis"], len(specs[0].shape))},
    )
)


def _group_norm(x: jax.Array, w: jax.Array, b: jax.Array, groups: int, eps: float) -> jax.Array:
    n = x.shape[0]
    g = x.reshape(n, groups, -1)
    mean = g.mean(axis=-1, keepdims=True)
    var = jnp.square(g - mean).mean(axis=-1, keepdims=True)
    y = ((g - mean) * jax.lax.rsqrt(var + eps)).reshape(x.shape)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return y * w.reshape(shape) + b.reshape(shape)


def _group_norm_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    x, w, b = specs
    same_dtype("group_norm", specs)
    if len(x.shape) < 2:
        raise ValueError(f"group_norm needs an input of rank >= 2 (N, C, ...), got {x.shape}")
    c = x.shape[1]
    if w.shape != (c,) or b.shape != (c,):
        raise ValueError(f"group_norm weight and bias must have shape ({c},), got {w.shape} and {b.shape}")
    if c % attrs["num_groups"]:
        raise ValueError(f"group_norm: {c} channels do not split into {attrs['num_groups']} groups")
    return [x]


GROUP_NORM = register(
    OpDef(
        "group_norm",
        _group_norm_infer,
        lambda ctx, attrs, x, w, b: [_group_norm(x, w, b, attrs["num_groups"], attrs["eps"])],
        grad=vjp_grad({0: (0, 1), 1: (0,), 2: ()}),
    )
)


def _batch_norm_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    x = specs[0]
    if len(x.shape) < 2:
        raise ValueError(f"batch_norm_inference needs an input of rank >= 2 (N, C, ...), got {x.shape}")
    for name, s in zip(("scale", "bias", "mean", "var"), specs[1:]):
        if s.shape != (x.shape[1],):
            raise ValueError(f"batch_norm_inference {name} must have shape ({x.shape[1]},), got {s.shape}")
    return [x]


def _lower_batch_norm(ctx: Any, attrs: Attrs, x: jax.Array, *per_channel: jax.Array) -> list[jax.Array]:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    scale, bias, mean, var = (v.reshape(shape) for v in per_channel)
    return [((x - mean) * jax.lax.rsqrt(var + attrs["epsilon"]) * scale + bias).astype(x.dtype)]


# Inference only: normalised by the given estimates; `momentum` has no effect, as in popxl.
BATCH_NORM_INFERENCE = register(OpDef("batch_norm_inference", _batch_norm_infer, _lower_batch_norm, grad=vjp_grad()))


def _histogram_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    return [TensorSpec((len(attrs["levels"]) + 1,), dtypes.uint32)]


def _lower_histogram(ctx: Any, attrs: Attrs, x: jax.Array) -> list[jax.Array]:
    # Bin k counts values in [levels[k-1], levels[k]); bin 0 those below the first level, the last those at or above
    # the last level.
    values = jnp.abs(x) if attrs["absolute_of_input"] else x
    levels = jnp.asarray(attrs["levels"], jnp.float32)
    bins = jnp.searchsorted(levels, values.astype(jnp.float32).ravel(), side="right")
    return [jnp.zeros(len(attrs["levels"]) + 1, jnp.uint32).at[bins].add(1)]


# Levels are used in increasing order, whatever order they come in, as popart sorts them.
HISTOGRAM = register(
    OpDef(
        "histogram",
        _histogram_infer,
        _lower_histogram,
        normalise=lambda specs, attrs: {**attrs, "levels": tuple(sorted(float(v) for v in attrs["levels"]))},
    )
)
