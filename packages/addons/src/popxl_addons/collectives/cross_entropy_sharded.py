"""popxl-addons' cross entropy of logits whose classes are sharded: `CrossEntropySharded` and its
within-replica form `CrossEntropyShardedWR`, with their fused gradients.

Tensor parallel (`cross_entropy_sharded_loss`): each replica of a replica grouping (of any
constant stride; popxl-addons' docstring says stride 1, its GPT-3 175B uses strided ones) holds its
own slice of the classes, `logits` of shape `(n_samples, sharded_n_classes)`, and the same
labels already shifted by its slice's offset (so they may be negative or past the slice).
The op computes a stable log softmax over all the classes of the group: the row maximum is
all-reduced with max, the sums of `exp(x - max)` are all-reduced with add. Its outputs are
each sample's loss `-log softmax(x)[label]` (the one replica whose slice holds the label
contributes it, the others 0, all-reduced with add, so every replica has the same loss) and
the replica's slice of `-log softmax(x)`. The gradient op uses that slice and the incoming
gradient of the loss alone, with no communication: `dx = dl * (softmax(x) - onehot(label))`
on each replica's slice (the loss gradient is taken to be the same on every replica); the
gradient of the second output is not propagated, as in popart. The wrapper applies
`ignore_index` (a mask of the labels equal to it) and the reduction with popxl ops.

Within a replica (`cross_entropy_sharded_wr_loss`): the slices are separate tensors on
separate IPUs of one replica, the labels are not shifted (the op subtracts each slice's
offset), and the loss is returned unreduced. Here all slices are one device's values.

Both compute in float32 whatever the logits' type (popart's reductions use float32
partials; here the whole softmax does, so that a large vocabulary's sum of exponentials
cannot overflow float16) and return the logits' type.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp

import popxl
from popxl import ops
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

__all__ = ["cross_entropy_sharded_loss", "cross_entropy_sharded_wr_loss"]

Reduction = Literal["mean", "sum", "none"]


def _check_logits_labels(what: str, logits: popxl.TensorSpec, labels: popxl.TensorSpec) -> None:
    if len(logits.shape) != 2:
        raise ValueError(f"{what}: logits must have rank 2 (n_samples, sharded_n_classes), got {logits.shape}")
    if len(labels.shape) != 1:
        raise ValueError(f"{what}: indices must have rank 1 (n_samples,), got {labels.shape}")
    if logits.shape[0] != labels.shape[0]:
        raise ValueError(f"{what}: logits {logits.shape} and indices {labels.shape} differ in n_samples")
    if not logits.dtype.is_floating_point or not labels.dtype.is_int:
        raise ValueError(f"{what}: needs floating point logits and integer indices, got {logits.dtype}, {labels.dtype}")


def _in_slice(labels: Any, size: int) -> Any:
    """Whether each label indexes a class of a slice of `size` classes (unsigned labels are never negative)."""
    below = labels < size
    return below if jnp.issubdtype(labels.dtype, jnp.unsignedinteger) else below & (labels >= 0)


def _pick(values: Any, labels: Any) -> Any:
    """Each row's value at its label, 0 where the label is outside the row."""
    inside = _in_slice(labels, values.shape[1])
    index = jnp.where(inside, labels, 0).astype(jnp.int32)
    picked = jnp.take_along_axis(values, index[:, None], axis=1)[:, 0]
    return jnp.where(inside, picked, jnp.zeros_like(picked))


def _softmax_grad(dloss: Any, neg_log_softmax: Any, labels: Any, dtype: Any) -> Any:
    """`dloss * (softmax - onehot(labels))` of a slice, from its `-log softmax`, in float32."""
    dl = dloss.astype(jnp.float32)[:, None]
    onehot = jax.nn.one_hot(labels, neg_log_softmax.shape[1], dtype=jnp.float32)  # 0 outside the slice
    onehot = jnp.where(_in_slice(labels, neg_log_softmax.shape[1])[:, None], onehot, 0.0)
    return ((jnp.exp(-neg_log_softmax.astype(jnp.float32)) - onehot) * dl).astype(dtype)


# ---- tensor parallel: the classes sharded over a replica grouping --------------------------------------------


def _normalise_tp(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> dict[str, Any]:
    _check_logits_labels("cross_entropy_sharded", specs[0], specs[1])
    if not attrs["group"].is_const:
        raise NotImplementedError(
            f"cross_entropy_sharded needs a grouping with a constant stride, got {attrs['group']}"
        )
    return {"group": attrs["group"], "available_memory_proportion": float(attrs["available_memory_proportion"])}


def _infer_tp(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> list[popxl.TensorSpec]:
    logits = specs[0]
    return [popxl.TensorSpec((logits.shape[0],), logits.dtype), logits]


def _lower_tp(ctx: LoweringContext, attrs: Attrs, logits: Any, labels: Any) -> list[Any]:
    group = attrs["group"]
    x = logits.astype(jnp.float32)
    row_max = all_reduce_values(ctx, jnp.max(x, axis=1), "max", group)
    shifted = x - row_max[:, None]
    denominator = all_reduce_values(ctx, jnp.sum(jnp.exp(shifted), axis=1), "add", group)
    neg_log_softmax = jnp.log(denominator)[:, None] - shifted
    loss = all_reduce_values(ctx, _pick(neg_log_softmax, labels), "add", group)
    return [loss.astype(logits.dtype), neg_log_softmax.astype(logits.dtype)]


def _grad_tp(gb: GradBuilder, op: Op, out_grads: Sequence[popxl.Tensor | None]) -> list[popxl.Tensor | None]:
    dloss = out_grads[0]
    if dloss is None:
        return [None, None]
    inputs = [dloss, gb.fwd(op.outputs[1]), gb.fwd(op.inputs[1])]
    return [create_op(CROSS_ENTROPY_SHARDED_GRAD, inputs, dict(op.attrs))[0], None]


CROSS_ENTROPY_SHARDED = register(
    OpDef(
        "cross_entropy_sharded",
        _infer_tp,
        _lower_tp,
        grad=_grad_tp,
        normalise=_normalise_tp,
        output_names=("cross_entropy_sharded_out", "cross_entropy_sharded_soft_max_out"),
        effects=Effects(groupings=group_of),
    )
)


def _infer_tp_grad(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> list[popxl.TensorSpec]:
    dloss, neg_log_softmax, labels = specs
    _check_logits_labels("cross_entropy_sharded_grad", neg_log_softmax, labels)
    if dloss.shape != labels.shape:
        raise ValueError(f"cross_entropy_sharded_grad: the loss gradient {dloss.shape} must match {labels.shape}")
    return [neg_log_softmax]


def _lower_tp_grad(ctx: LoweringContext, attrs: Attrs, dloss: Any, neg_log_softmax: Any, labels: Any) -> list[Any]:
    return [_softmax_grad(dloss, neg_log_softmax, labels, neg_log_softmax.dtype)]


# popart's CrossEntropyShardedGradOp: no communication, and no gradient of its own.
CROSS_ENTROPY_SHARDED_GRAD = register(
    OpDef(
        "cross_entropy_sharded_grad",
        _infer_tp_grad,
        _lower_tp_grad,
        output_names=("cross_entropy_sharded_grad_out",),
    )
)


def cross_entropy_sharded_loss(
    logits: popxl.Tensor,
    indices: popxl.Tensor,
    ignore_index: popxl.Tensor | None = None,
    replica_grouping: popxl.ReplicaGrouping | None = None,
    reduction: Reduction = "mean",
    available_memory_proportion: float = 0.4,
) -> popxl.Tensor:
    """Cross entropy of logits whose classes are sharded over the replicas of `replica_grouping` (of any
    constant stride, such as the strided tensor-parallel groups of a 2D sharding).

    `logits` `(n_samples, sharded_n_classes)` differ between the replicas; `indices` `(n_samples,)` are each
    replica's labels already shifted by its slice's first class. Samples whose index equals `ignore_index`
    (a tensor, shifted like the indices) contribute nothing; the loss is reduced by `reduction`, "mean"
    dividing by the samples not ignored. The loss is the same on every replica. `available_memory_proportion`
    is recorded (it tunes an IPU gather).
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"`reduction` should be one of `mean`, `sum` and `none`. Passed: {reduction}")
    group = replica_grouping if replica_grouping is not None else popxl.gir().replica_grouping()
    attrs = {"group": group, "available_memory_proportion": available_memory_proportion}
    loss = create_op(CROSS_ENTROPY_SHARDED, [logits, indices], attrs)[0]
    mask = None
    if ignore_index is not None:
        mask = ops.cast(ops.logical_not(ops.equal(indices, ignore_index)), loss.dtype)
        loss = loss * mask
    if reduction == "mean":
        return ops.mean(loss) if mask is None else ops.sum(loss) / ops.sum(mask)
    if reduction == "sum":
        return ops.sum(loss)
    return loss


# ---- within a replica: the slices are tensors on several IPUs -------------------------------------------------


def _shards(specs: Sequence[Any]) -> int:
    return len(specs) // 2


def _normalise_wr(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> dict[str, Any]:
    k = _shards(specs)
    if k == 0 or len(specs) != 2 * k:
        raise ValueError(f"cross_entropy_sharded_wr needs as many logits as indices, got {len(specs)} inputs")
    ipus = [int(i) for i in attrs["ipus"]]
    if len(ipus) != k:
        raise ValueError(f"cross_entropy_sharded_wr: {k} logits on {len(ipus)} ipus")
    for logits, labels in zip(specs[:k], specs[k:]):
        _check_logits_labels("cross_entropy_sharded_wr", logits, labels)
        if logits.dtype != specs[0].dtype or logits.shape[0] != specs[0].shape[0]:
            raise ValueError("cross_entropy_sharded_wr: every logits tensor needs the same type and n_samples")
    return {"ipus": ipus}


def _infer_wr(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> list[popxl.TensorSpec]:
    first = specs[0]
    return [popxl.TensorSpec((first.shape[0],), first.dtype), *specs[: _shards(specs)]]


def _offsets(sizes: Sequence[int]) -> list[int]:
    starts = [0]
    for size in sizes[:-1]:
        starts.append(starts[-1] + size)
    return starts


def _shifted(labels: Any, start: int) -> Any:
    """Labels relative to a slice starting at class `start` (negative or past it when outside)."""
    return labels.astype(jnp.int32) - jnp.int32(start)


def _lower_wr(ctx: LoweringContext, attrs: Attrs, *values: Any) -> list[Any]:
    k = _shards(values)
    logits, labels = values[:k], values[k:]
    xs = [x.astype(jnp.float32) for x in logits]
    row_max = jnp.max(jnp.stack([jnp.max(x, axis=1) for x in xs]), axis=0)
    shifted = [x - row_max[:, None] for x in xs]
    denominator = sum((jnp.sum(jnp.exp(s), axis=1) for s in shifted), jnp.zeros_like(row_max))
    neg_log_softmax = [jnp.log(denominator)[:, None] - s for s in shifted]
    starts = _offsets([x.shape[1] for x in xs])
    loss = sum(
        (_pick(n, _shifted(lab, start)) for n, lab, start in zip(neg_log_softmax, labels, starts)),
        jnp.zeros_like(row_max),
    )
    dtype = logits[0].dtype
    return [loss.astype(dtype), *(n.astype(dtype) for n in neg_log_softmax)]


def _grad_wr(gb: GradBuilder, op: Op, out_grads: Sequence[popxl.Tensor | None]) -> list[popxl.Tensor | None]:
    dloss = out_grads[0]
    k = _shards(op.inputs)
    if dloss is None:
        return [None] * (2 * k)
    inputs = [dloss, *(gb.fwd(t) for t in op.outputs[1:]), *(gb.fwd(t) for t in op.inputs[k:])]
    names = [f"cross_entropy_sharded_wr_grad_out_{i}" for i in range(k)]
    grads = create_op(CROSS_ENTROPY_SHARDED_WR_GRAD, inputs, dict(op.attrs), names=names)
    return [*grads, *([None] * k)]


CROSS_ENTROPY_SHARDED_WR = register(
    OpDef(
        "cross_entropy_sharded_wr",
        _infer_wr,
        _lower_wr,
        grad=_grad_wr,
        normalise=_normalise_wr,
        output_names=("cross_entropy_sharded_out",),
    )
)


def _infer_wr_grad(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> list[popxl.TensorSpec]:
    k = (len(specs) - 1) // 2
    if len(specs) != 2 * k + 1 or k == 0:
        raise ValueError(f"cross_entropy_sharded_wr_grad: a loss gradient, then slices and labels; got {len(specs)}")
    for neg_log_softmax, labels in zip(specs[1 : k + 1], specs[k + 1 :]):
        _check_logits_labels("cross_entropy_sharded_wr_grad", neg_log_softmax, labels)
    return list(specs[1 : k + 1])


def _lower_wr_grad(ctx: LoweringContext, attrs: Attrs, dloss: Any, *values: Any) -> list[Any]:
    k = len(values) // 2
    slices, labels = values[:k], values[k:]
    starts = _offsets([s.shape[1] for s in slices])
    return [_softmax_grad(dloss, s, _shifted(lab, start), s.dtype) for s, lab, start in zip(slices, labels, starts)]


CROSS_ENTROPY_SHARDED_WR_GRAD = register(OpDef("cross_entropy_sharded_wr_grad", _infer_wr_grad, _lower_wr_grad))


def cross_entropy_sharded_wr_loss(
    logits: Sequence[popxl.Tensor], indices: Sequence[popxl.Tensor], ipus: Iterable[int] | None = None
) -> popxl.Tensor:
    """Unreduced cross entropy `(n_samples,)` of logits whose classes are split into `logits[i]`
    `(n_samples, n_classes_i)`, one per IPU of `ipus` (in class order), with each IPU's copy of the same
    unshifted labels in `indices[i]`. `ipus` defaults to `0 .. len(logits) - 1`; it places nothing here."""
    logits, indices = list(logits), list(indices)
    if len(logits) != len(indices):
        raise ValueError("You must provide the same number of logits and indices.")
    placed = list(ipus) if ipus is not None else list(range(len(logits)))
    if len(placed) != len(logits):
        raise ValueError(
            f"Number of specified tensor does not equal number of specified IPUs. {len(logits)} != {len(placed)}"
        )
    names = ["cross_entropy_sharded_out", *(f"cross_entropy_sharded_soft_max_out_{i}" for i in range(len(logits)))]
    return create_op(CROSS_ENTROPY_SHARDED_WR, [*logits, *indices], {"ipus": placed}, names=names)[0]
