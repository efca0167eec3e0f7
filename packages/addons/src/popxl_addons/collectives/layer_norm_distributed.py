"""popxl-addons' `LayerNormDistributed` custom op: a layer norm whose normalised axis is sharded.

Each replica of a replica grouping holds a slice `(N, H / group_size)` of the hidden axis of an
`(N, H)` input, and the slices of `weight` and `bias` that go with it. The op normalises each
row over all `H` values of the group: the per-row sums are all-reduced with add over the
group, then divided by `H` (`group_size` times the slice's width, as popxl-addons' opx
counts it). popart's op has three outputs, `Y`, `Mean` and `InvStdDev` (one statistic per
row, the same on every replica of the group); `layer_norm_distributed` returns `Y`.

Numerics. As the runtime's `group_norm`, everything is computed in float32 whatever the
input's type (popart asks poplin for float32 partials); the outputs are in the input's type,
as popart declares them (float16 or float32 only, as popart's op definition allows). The
variance is the biased one, from the centred values (two all-reduces, poplin's stable
algorithm; popart's default single pass `E[x^2] - E[x]^2` differs only by rounding).

Gradient (popart's `LayerNormDistributedGradOp`, from `X`, `Scale`, the forward's `Mean` and
`InvStdDev`, and the gradient of `Y` only). With `xhat = (x - mean) * inv_std` and
`g = dy * weight`, `dx = inv_std * (g - mean(g) - xhat * mean(g * xhat))` where both means
are over the whole hidden axis: the two per-row sums are all-reduced with add over the
group. `dweight = sum(dy * xhat)` and `dbias = sum(dy)` over the rows are each replica's
own slice, with no communication.

Found in popxl-addons: its opx hands `dy` to poplin's `distributedNormStatisticsGradients`
without first multiplying it by the scale (popnn's own norms do, through `normGradients`),
so there `dx` lacks the factor `weight`; it is exact only while the weight is 1, which is
what popxl-addons' test checks. This op kind gives the gradient of the function it computes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

import popxl
from popxl.extension import (
    Attrs,
    Effects,
    GradBuilder,
    LoweringContext,
    Op,
    OpDef,
    all_reduce_values,
    create_op,
    group_of,
    register,
)

__all__ = ["layer_norm_distributed"]

_TYPES = (popxl.float16, popxl.float32)


def _normalise(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> dict[str, Any]:
    group = attrs["group"]
    if not isinstance(group, popxl.ReplicaGrouping) or not group.is_const:
        raise ValueError(f"layer_norm_distributed needs a replica grouping with a constant stride, got {group}")
    return {"epsilon": float(attrs["epsilon"]), "group": group}


def _check_operands(what: str, x: popxl.TensorSpec, w: popxl.TensorSpec, *others: popxl.TensorSpec) -> None:
    if len(x.shape) != 2:
        raise ValueError(f"{what}: the input must have rank 2 (N, H / group_size), got shape {x.shape}")
    if w.shape != (x.shape[1],):
        raise ValueError(f"{what}: the weight must have shape ({x.shape[1]},) to match the input, got {w.shape}")
    for t in (x, w, *others):
        if t.dtype not in _TYPES:
            raise ValueError(f"{what}: needs float16 or float32 tensors, got {t.dtype}")
        if t.dtype != x.dtype:
            raise ValueError(f"{what}: every tensor must have the input's type {x.dtype}, got {t.dtype}")


def _infer(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> list[popxl.TensorSpec]:
    x, w, b = specs
    _check_operands("layer_norm_distributed", x, w, b)
    if b.shape != w.shape:
        raise ValueError(f"layer_norm_distributed: the bias must have shape {w.shape} as the weight, got {b.shape}")
    stats = popxl.TensorSpec((x.shape[0],), x.dtype)
    return [x, stats, stats]


def _hidden_size(x: jax.Array, attrs: Attrs) -> int:
    """The width of the whole hidden axis: the slice's, times the group's size."""
    return int(x.shape[1]) * int(attrs["group"].group_size)


def _lower(ctx: LoweringContext, attrs: Attrs, x: jax.Array, w: jax.Array, b: jax.Array) -> list[jax.Array]:
    group, h = attrs["group"], _hidden_size(x, attrs)
    xf = x.astype(jnp.float32)
    mean = all_reduce_values(ctx, jnp.sum(xf, axis=1), "add", group) / h
    centred = xf - mean[:, None]
    var = all_reduce_values(ctx, jnp.sum(jnp.square(centred), axis=1), "add", group) / h
    inv_std = jax.lax.rsqrt(var + attrs["epsilon"])
    y = centred * inv_std[:, None] * w.astype(jnp.float32) + b.astype(jnp.float32)
    return [y.astype(x.dtype), mean.astype(x.dtype), inv_std.astype(x.dtype)]


def _grad(gb: GradBuilder, op: Op, out_grads: Sequence[popxl.Tensor | None]) -> list[popxl.Tensor | None]:
    # The statistics' own gradients are not propagated, as popart does not.
    dy = out_grads[0]
    wanted = [gb.wants(t) for t in op.inputs]
    if dy is None or not any(wanted):
        return [None, None, None]
    x, w, _ = op.inputs
    inputs = [gb.fwd(x), gb.fwd(w), gb.fwd(op.outputs[1]), gb.fwd(op.outputs[2]), dy]
    grads = create_op(LAYER_NORM_DISTRIBUTED_GRAD, inputs, dict(op.attrs))
    return [g if want else None for g, want in zip(grads, wanted)]


LAYER_NORM_DISTRIBUTED = register(
    OpDef(
        "layer_norm_distributed",
        _infer,
        _lower,
        grad=_grad,
        normalise=_normalise,
        output_names=("outputs", "mean", "std"),
        departure="popxl-addons' custom op (no popxl op); its x gradient has the weight's factor (popxl-addons': not)",
        effects=Effects(groupings=group_of),
    )
)


def _infer_grad(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> list[popxl.TensorSpec]:
    x, w, mean, inv_std, dy = specs
    _check_operands("layer_norm_distributed_grad", x, w, mean, inv_std, dy)
    if dy.shape != x.shape:
        raise ValueError(f"layer_norm_distributed_grad: the output gradient {dy.shape} must match the input {x.shape}")
    if mean.shape != (x.shape[0],) or inv_std.shape != (x.shape[0],):
        raise ValueError(
            f"layer_norm_distributed_grad: mean {mean.shape} and inv_std_dev {inv_std.shape} "
            f"must have shape ({x.shape[0]},)"
        )
    return [x, w, w]


def _lower_grad(
    ctx: LoweringContext, attrs: Attrs, x: jax.Array, w: jax.Array, mean: jax.Array, inv_std: jax.Array, dy: jax.Array
) -> list[jax.Array]:
    h = _hidden_size(x, attrs)
    s = inv_std.astype(jnp.float32)[:, None]
    xhat = (x.astype(jnp.float32) - mean.astype(jnp.float32)[:, None]) * s
    d = dy.astype(jnp.float32)
    g = d * w.astype(jnp.float32)
    # Both row sums in one all-reduce, as popart's opx reduces them together.
    sums = all_reduce_values(ctx, jnp.stack([jnp.sum(g, axis=1), jnp.sum(g * xhat, axis=1)]), "add", attrs["group"])
    mean_g, mean_gx = sums[0][:, None] / h, sums[1][:, None] / h
    dx = s * (g - mean_g - xhat * mean_gx)
    dw = jnp.sum(d * xhat, axis=0)
    db = jnp.sum(d, axis=0)
    return [dx.astype(x.dtype), dw.astype(w.dtype), db.astype(w.dtype)]


LAYER_NORM_DISTRIBUTED_GRAD = register(
    OpDef(
        "layer_norm_distributed_grad",
        _infer_grad,
        _lower_grad,
        normalise=_normalise,
        output_names=(
            "layer_norm_distributed_x_grad",
            "layer_norm_distributed_scale_grad",
            "layer_norm_distributed_bias_grad",
        ),
        departure="popxl-addons' gradient op, with the weight's factor in the input gradient that popxl-addons' lacks",
        effects=Effects(groupings=group_of),
    )
)


def layer_norm_distributed(
    t: popxl.Tensor,
    w: popxl.Tensor,
    b: popxl.Tensor,
    epsilon: float = 1e-5,
    group: popxl.ReplicaGrouping | None = None,
) -> popxl.Tensor:
    """Layer norm of `t` `(N, H / group_size)`, whose hidden axis is sharded over the replicas of `group`
    (default: all replicas), with this replica's slices `w` and `b` `(H / group_size,)` of the weight and bias."""
    grouping = group if group is not None else popxl.gir().replica_grouping()
    return create_op(LAYER_NORM_DISTRIBUTED, [t, w, b], {"epsilon": epsilon, "group": grouping})[0]
