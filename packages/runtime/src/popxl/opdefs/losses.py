"""Negative log likelihood, as popart computes it: over the last axis of `probs`, labels indexing classes.

The loss of a sample is `-log(max(p, eps))` of its label's probability (eps
1e-7, or 6.104e-5 for float16), or `-p` when `probs` already holds log
probabilities. Samples whose label is `ignore_index` contribute nothing;
'mean' divides by the number of samples, or with `ignore_index` by the number
not ignored (at least one).

`nll_loss` takes labels of the shape of `probs` but its last axis, as popart's
NllOp; `nll_loss_with_softmax_grad` flattens both, as popart's
NlllWithSoftmaxGradDirectOp, so its labels may have any shape with one element
per row of classes, and its unreduced loss has the labels' shape.

A label outside [0, classes) that is not `ignore_index` makes a checked run
raise `popxl.OutOfRangeError`; unchecked, its probability counts as 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

from popxl.op import CHECK_RESULT, Attrs, Effects, OpDef, Resource, register
from popxl.opdefs.common import vjp_grad
from popxl.opdefs.indexing import check_indices
from popxl.tensor import TensorSpec

if TYPE_CHECKING:
    from popxl.lowering.interpreter import LoweringContext

REDUCTIONS = ("mean", "sum", "none")


def _check_attrs_and_labels(specs: Sequence[TensorSpec], attrs: Attrs) -> None:
    probs, labels = specs[0], specs[1]
    if attrs["reduction"] not in REDUCTIONS:
        raise ValueError(f"Not a valid reduction: {attrs['reduction']}. Must choose from: {', '.join(REDUCTIONS)}")
    if not labels.dtype.is_int:
        raise ValueError(f"nll_loss labels must be integers, got {labels.dtype.name}")
    if not probs.shape:
        raise ValueError("nll_loss probs must have a classes axis, got a scalar")


def _normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    _check_attrs_and_labels(specs, attrs)
    probs, labels = specs[0], specs[1]
    # popart's NllOp: the labels have every axis of the probs but the last.
    if tuple(labels.shape) != tuple(probs.shape[:-1]):
        raise ValueError(f"nll_loss labels of shape {labels.shape} do not index probs of shape {probs.shape}")
    return dict(attrs)


def _normalise_flattened(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    _check_attrs_and_labels(specs, attrs)
    probs, labels = specs[0], specs[1]
    # popart's NlllWithSoftmaxGradDirectOp flattens both: any labels with one element per row of classes.
    rows = math.prod(probs.shape[:-1])
    if math.prod(labels.shape) != rows:
        raise ValueError(
            f"nll_loss_with_softmax_grad needs one label per row of classes: labels of shape {labels.shape} "
            f"({math.prod(labels.shape)} elements) for probs of shape {probs.shape} ({rows} rows)"
        )
    return dict(attrs)


def _loss_spec(probs: TensorSpec, labels: TensorSpec, attrs: Attrs) -> TensorSpec:
    return TensorSpec(labels.shape if attrs["reduction"] == "none" else (), probs.dtype)


def _picked(probs: jax.Array, labels: jax.Array) -> jax.Array:
    onehot = jax.nn.one_hot(labels, probs.shape[-1], dtype=probs.dtype)
    return jnp.sum(onehot * probs, axis=-1)


def _kept(labels: jax.Array, attrs: Attrs) -> jax.Array:
    ignore = attrs["ignore_index"]
    return jnp.ones(labels.shape, bool) if ignore is None else labels != ignore


def _scale(labels: jax.Array, kept: jax.Array, attrs: Attrs) -> jax.Array:
    """The factor of each sample's loss in the reduced loss."""
    if attrs["reduction"] != "mean":
        return jnp.float32(1)
    if attrs["ignore_index"] is None:
        return jnp.float32(1 / max(labels.size, 1))
    return 1 / jnp.maximum(jnp.sum(kept), 1).astype(jnp.float32)


def _losses(probs: jax.Array, labels: jax.Array, attrs: Attrs) -> jax.Array:
    picked = _picked(probs, labels)
    if not attrs["log_prob"]:
        eps = 6.104e-5 if probs.dtype == jnp.float16 else 1e-7
        picked = jnp.log(jnp.maximum(picked, jnp.asarray(eps, probs.dtype)))
    return jnp.where(_kept(labels, attrs), -picked, jnp.zeros_like(picked))


def _reduce(losses: jax.Array, labels: jax.Array, attrs: Attrs) -> jax.Array:
    if attrs["reduction"] == "none":
        return losses
    total = jnp.sum(losses.astype(jnp.float32)) * _scale(labels, _kept(labels, attrs), attrs)
    return total.astype(losses.dtype)


def _checked(attrs: Attrs) -> frozenset[Resource]:
    return frozenset({CHECK_RESULT})


def _check_labels(ctx: LoweringContext, what: str, labels: jax.Array, classes: int, attrs: Attrs) -> None:
    ignore = attrs["ignore_index"]
    # An ignored label is valid whatever its value.
    checked = labels if ignore is None else jnp.where(labels == ignore, 0, labels)
    check_indices(ctx, checked, 0, classes, f"{what} label")


def _lower_nll(ctx: LoweringContext, attrs: Attrs, probs: jax.Array, labels: jax.Array) -> list[jax.Array]:
    _check_labels(ctx, "nll_loss", labels, probs.shape[-1], attrs)
    return [_reduce(_losses(probs, labels, attrs), labels, attrs)]


NLL = register(
    OpDef(
        "nll_loss",
        lambda specs, attrs: [_loss_spec(specs[0], specs[1], attrs)],
        _lower_nll,
        grad=vjp_grad({0: (0, 1)}),
        normalise=_normalise,
        effects=Effects(writes=_checked),
    )
)


def _lower_nll_softmax_grad(
    ctx: LoweringContext, attrs: Attrs, probs: jax.Array, labels: jax.Array, loss_grad: jax.Array
) -> list[jax.Array]:
    rows = probs.reshape(-1, probs.shape[-1])
    flat = labels.reshape(-1)
    _check_labels(ctx, "nll_loss_with_softmax_grad", flat, rows.shape[-1], attrs)
    kept = _kept(flat, attrs)
    loss = _reduce(_losses(rows, flat, {**attrs, "log_prob": False}), flat, attrs)
    # d loss / d logits of a softmax: (p - onehot), per sample scaled as the loss is, and by dE/dl.
    onehot = jax.nn.one_hot(flat, rows.shape[-1], dtype=jnp.float32)
    dl = loss_grad.astype(jnp.float32)
    dl = jnp.broadcast_to(dl, labels.shape).reshape(-1, 1) if attrs["reduction"] == "none" else dl.reshape(())
    dx = (rows.astype(jnp.float32) - onehot) * (_scale(flat, kept, attrs) * dl) * kept[:, None]
    if attrs["reduction"] == "none":
        loss = loss.reshape(labels.shape)
    return [loss, dx.reshape(probs.shape).astype(probs.dtype)]


def _nll_softmax_grad_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    probs, labels, loss_grad = specs
    loss = _loss_spec(probs, labels, attrs)
    if loss_grad.shape not in ((), (1,), loss.shape):
        raise ValueError(f"loss_grad of shape {loss_grad.shape} does not match the loss's {loss.shape}")
    return [loss, probs]


NLL_WITH_SOFTMAX_GRAD = register(
    OpDef(
        "nll_loss_with_softmax_grad",
        _nll_softmax_grad_infer,
        _lower_nll_softmax_grad,
        normalise=_normalise_flattened,
        output_names=("loss", "dx"),
        effects=Effects(writes=_checked),
    )
)
