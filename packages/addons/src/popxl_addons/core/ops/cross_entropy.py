"""popxl-addons' cross entropy of logits, and the same loss with its gradient fused.

popxl-addons builds both from popxl ops rather than a custom op: a softmax over the
last axis, then popart's negative log likelihood (`nll_loss`), or for the fused form
`nll_loss_with_softmax_grad`, which returns the loss together with dE/dlogits =
(softmax - onehot) scaled as the loss is reduced and by `loss_scaling`. The same op
kinds are used here, so the maths is popart's: the probability of a sample's label
is clamped at 1e-7 (6.104e-5 in float16) before the log, a label equal to
`ignore_index` adds nothing to the loss or the gradient, and `"mean"` divides by the
number of samples not ignored. The fused gradient is computed in float32 and has
the logits' type; the loss is never scaled by `loss_scaling`.
"""

from __future__ import annotations

from typing import Literal

import popxl
from popxl import ops

Reduction = Literal["mean", "sum", "none"]

__all__ = ["cross_entropy", "cross_entropy_with_grad"]


def cross_entropy(
    x: popxl.Tensor, labels: popxl.Tensor, ignore_index: int | None = None, reduction: Reduction = "mean"
) -> popxl.Tensor:
    """The cross entropy of unnormalised `x` (shape `(*dims, C)`) for integer `labels` (shape `dims`).

    Reduced over the samples by `reduction` ("mean", "sum" or "none"); samples labelled
    `ignore_index` contribute nothing.
    """
    return ops.nll_loss(ops.softmax(x, axis=-1), labels, ignore_index=ignore_index, reduction=reduction)


def cross_entropy_with_grad(
    x: popxl.Tensor,
    labels: popxl.Tensor,
    loss_scaling: float | popxl.Tensor = 1,
    ignore_index: int | None = None,
    reduction: Reduction = "mean",
) -> tuple[popxl.Tensor, popxl.Tensor]:
    """`(loss, dloss/dx * loss_scaling)` for unnormalised `x` and integer `labels`, as `cross_entropy` defines
    the loss; the loss itself is not scaled. A float `loss_scaling` becomes a float32 constant."""
    scale = loss_scaling if isinstance(loss_scaling, popxl.Tensor) else popxl.constant(loss_scaling, popxl.float32)
    return ops.nll_loss_with_softmax_grad(
        ops.softmax(x, axis=-1), labels, loss_grad=scale, ignore_index=ignore_index, reduction=reduction
    )
