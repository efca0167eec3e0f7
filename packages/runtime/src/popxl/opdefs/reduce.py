"""Reductions, softmax, normalisation (group norm, batch norm for inference) and histograms."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

from popxl import dtypes
from popxl.op import Attrs, Op, OpDef, PopartFacts, create_op, register
from popxl.opdefs.common import axis_in, like_input, same_dtype, vjp_grad
from popxl.tensor import Tensor, TensorSpec

if TYPE_CHECKING:
    from popxl.grad_builder import GradBuilder


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


def in_float32(fn: Any) -> Any:
    """`fn` of a floating array computed in float32 and cast back to the array's type (integers as they are).

    Partial sums, products and squares of float16 or bfloat16 values then neither overflow nor lose their low
    bits, and since the cast is part of the lowering, JAX's VJP of it (the gradient) runs in float32 as well.
    """

    def wide(x: jax.Array, *args: Any, **kwargs: Any) -> jax.Array:
        if not jnp.issubdtype(x.dtype, jnp.floating) or x.dtype == jnp.float32:
            return fn(x, *args, **kwargs)
        return fn(x.astype(jnp.float32), *args, **kwargs).astype(x.dtype)

    return wide


def _reduction(name: str, fn: Any, linear: bool, wide: bool = True) -> OpDef:
    # Reductions that add or multiply elements keep float32 partials; max, min and median pick an element.
    reduce_fn = in_float32(fn) if wide else fn
    return register(
        OpDef(
            name,
            _reduce_infer,
            lambda ctx, attrs, x: [reduce_fn(x, axis=attrs["axis"], keepdims=attrs["keepdims"])],
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
REDUCE_MAX = _reduction("reduce_max", jnp.max, linear=False, wide=False)
REDUCE_MIN = _reduction("reduce_min", jnp.min, linear=False, wide=False)
REDUCE_PROD = _reduction("reduce_prod", jnp.prod, linear=False)
REDUCE_L1 = _reduction("reduce_l1", lambda x, axis, keepdims: jnp.sum(jnp.abs(x), axis, keepdims=keepdims), False)
REDUCE_L2 = _reduction("reduce_l2", lambda x, axis, keepdims: jnp.sqrt(jnp.sum(x * x, axis, keepdims=keepdims)), False)
REDUCE_LOG_SUM = _reduction(
    "reduce_log_sum", lambda x, axis, keepdims: jnp.log(jnp.sum(x, axis, keepdims=keepdims)), False
)
REDUCE_MEDIAN = _reduction("reduce_median", _median, linear=False, wide=False)

# LAMB's squared norms: the sum of squares of every element, in float32.
LAMB_SQUARE = register(
    OpDef(
        "lamb_square",
        lambda specs, attrs: [TensorSpec((), dtypes.float32)],
        lambda ctx, attrs, x: [jnp.sum(jnp.square(x.astype(jnp.float32)))],
    )
)


def _cumsum_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    return {**attrs, "dim": axis_in("cumsum", attrs["dim"], len(specs[0].shape))}


def _cumsum(x: jax.Array, axis: int) -> jax.Array:
    return jnp.cumsum(x, axis=axis, dtype=x.dtype)


# Running sums of floating values in float32, as the reductions.
CUMSUM = register(
    OpDef(
        "cumsum",
        like_input(0),
        lambda ctx, attrs, x: [in_float32(_cumsum)(x, attrs["dim"])],
        grad=vjp_grad(linear=True),
        normalise=_cumsum_normalise,
    )
)


SOFTMAX = register(
    OpDef(
        "softmax",
        like_input(0),
        # In float32: the exponentials' sum and the gradient's sum(dy * y) of a wide softmax of float16 values.
        lambda ctx, attrs, x: [in_float32(jax.nn.softmax)(x, axis=attrs["axis"])],
        grad=vjp_grad(),
        normalise=lambda specs, attrs: {**attrs, "axis": axis_in("softmax", attrs["axis"], len(specs[0].shape))},
    )
)


def _channel_shape(x: jax.Array) -> tuple[int, ...]:
    """The shape that broadcasts a per-channel (axis 1) vector against `x` (N, C, ...)."""
    return (1, -1) + (1,) * (x.ndim - 2)


def _group_statistics(x: jax.Array, groups: int, eps: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`x` as (N, groups, rest) in float32, with each group's mean and inverse standard deviation (float32)."""
    g = x.reshape(x.shape[0], groups, -1).astype(jnp.float32)
    mean = g.mean(axis=-1, keepdims=True)
    var = jnp.square(g - mean).mean(axis=-1, keepdims=True)
    return g, mean, jax.lax.rsqrt(var + eps)


def _lower_group_norm(ctx: Any, attrs: Attrs, x: jax.Array, w: jax.Array, b: jax.Array) -> list[jax.Array]:
    # Statistics and normalisation in float32 whatever the input's type, as popart's float32 partials; the three
    # outputs (Y, Mean, InvStdDev) in the input's type, the statistics one per sample and group, as popart's.
    g, mean, inv_std = _group_statistics(x, attrs["num_groups"], attrs["eps"])
    shape = _channel_shape(x)
    y = ((g - mean) * inv_std).reshape(x.shape) * w.reshape(shape).astype(jnp.float32)
    y = y + b.reshape(shape).astype(jnp.float32)
    return [y.astype(x.dtype), mean.reshape(-1).astype(x.dtype), inv_std.reshape(-1).astype(x.dtype)]


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
    stats = TensorSpec((x.shape[0] * attrs["num_groups"],), x.dtype)
    return [x, stats, stats]


def _group_norm_grad(gb: GradBuilder, op: Op, out_grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    # popart's GroupNormGradOp: from X, Scale, the forward's Mean and InvStdDev, and the gradient of Y only (the
    # statistics' own gradients are not propagated, as popart does not).
    dy = out_grads[0]
    wanted = [gb.wants(t) for t in op.inputs]
    if dy is None or not any(wanted):
        return [None, None, None]
    x, w, _ = op.inputs
    inputs = [gb.fwd(x), gb.fwd(w), gb.fwd(op.outputs[1]), gb.fwd(op.outputs[2]), dy]
    grads = create_op(GROUP_NORM_GRAD, inputs, {"num_groups": op.attrs["num_groups"], "eps": op.attrs["eps"]})
    return [g if want else None for g, want in zip(grads, wanted)]


def _group_norm_flops(in_specs: Sequence[TensorSpec], out_specs: Sequence[TensorSpec], attrs: Attrs) -> int:
    # popxl-addons' estimate: the means, the variances, normalising, then scaling and shifting.
    x = in_specs[0].shape
    out = math.prod(out_specs[0].shape)
    n_stats = out_specs[1].shape[0]  # one mean per sample and group
    averaged = (x[-1] * x[-2]) // attrs["num_groups"]
    means = averaged
    variances = 2 * averaged + 2 * n_stats
    normalise = 2 * out
    scale_and_bias = 2 * out
    return means + variances + normalise + scale_and_bias


GROUP_NORM = register(
    OpDef(
        "group_norm",
        _group_norm_infer,
        _lower_group_norm,
        grad=_group_norm_grad,
        output_names=("group_norm_out", "group_norm_mean", "group_norm_inv_std_dev"),
        popart=PopartFacts(flops=_group_norm_flops, op_type="GroupNormalization"),
    )
)


def _lower_group_norm_grad(
    ctx: Any, attrs: Attrs, x: jax.Array, w: jax.Array, mean: jax.Array, inv_std: jax.Array, dy: jax.Array
) -> list[jax.Array]:
    # The whitened form, in float32: with xhat = (x - mean) * inv_std and dxhat = dy * scale, per group
    # dx = inv_std * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)); dscale = sum(dy * xhat), dbias = sum(dy)
    # over the samples and the spatial axes.
    n, groups = x.shape[0], attrs["num_groups"]
    stat_shape = (n, groups, 1)
    m = mean.reshape(stat_shape).astype(jnp.float32)
    s = inv_std.reshape(stat_shape).astype(jnp.float32)
    xhat = (x.reshape(n, groups, -1).astype(jnp.float32) - m) * s
    d = dy.astype(jnp.float32)
    dxhat = (d * w.reshape(_channel_shape(x)).astype(jnp.float32)).reshape(n, groups, -1)
    dx = s * (dxhat - dxhat.mean(axis=-1, keepdims=True) - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
    per_channel = (0, *range(2, x.ndim))
    dscale = jnp.sum(d * xhat.reshape(x.shape), axis=per_channel)
    dbias = jnp.sum(d, axis=per_channel)
    return [dx.reshape(x.shape).astype(x.dtype), dscale.astype(w.dtype), dbias.astype(w.dtype)]


def _group_norm_grad_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    x, w, mean, inv_std, dy = specs
    if len(x.shape) < 2 or w.shape != (x.shape[1],) or dy.shape != x.shape:
        raise ValueError(f"group_norm_grad: x {x.shape}, scale {w.shape} and dy {dy.shape} do not match")
    stats = (x.shape[0] * attrs["num_groups"],)
    if mean.shape != stats or inv_std.shape != stats:
        raise ValueError(f"group_norm_grad: mean {mean.shape} and inv_std_dev {inv_std.shape} must have shape {stats}")
    return [x, w, w]


GROUP_NORM_GRAD = register(
    OpDef(
        "group_norm_grad",
        _group_norm_grad_infer,
        _lower_group_norm_grad,
        output_names=("group_norm_x_grad", "group_norm_scale_grad", "group_norm_bias_grad"),
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
    # In float32 whatever the input's type, so that its VJP (the gradient) runs in float32 too.
    shape = _channel_shape(x)
    scale, bias, mean, var = (v.reshape(shape).astype(jnp.float32) for v in per_channel)
    y = (x.astype(jnp.float32) - mean) * jax.lax.rsqrt(var + attrs["epsilon"]) * scale + bias
    return [y.astype(x.dtype)]


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
