"""Negative log likelihood losses of `popxl.ops`."""

from __future__ import annotations

import numpy as np

from popxl import dtypes
from popxl.creation import constant
from popxl.op import create_op
from popxl.opdefs import losses
from popxl.tensor import Tensor


def nll_loss(
    probs: Tensor, labels: Tensor, ignore_index: int | None = None, reduction: str = "mean", log_prob: bool = False
) -> Tensor:
    """Negative log likelihood of `labels` under `probs` (or log-probabilities with `log_prob`), over the last
    axis; reduced by 'mean', 'sum' or 'none'. Labels equal to `ignore_index` contribute nothing; any other
    label outside [0, classes) makes a checked run raise `popxl.OutOfRangeError` (unchecked: probability 0)."""
    attrs = {"ignore_index": ignore_index, "reduction": reduction, "log_prob": log_prob}
    # popxl: `loss` (python/popxl/ops/negative_log_likelihood.py).
    return create_op(losses.NLL, [probs, labels], attrs, names=["loss"])[0]


def nll_loss_with_softmax_grad(
    probs: Tensor,
    labels: Tensor,
    loss_grad: float | Tensor = 1,
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> tuple[Tensor, Tensor]:
    """The loss of `nll_loss` and its gradient with respect to the logits `x` of `probs = softmax(x)`, scaled
    by `loss_grad` (dE/dl). `labels` may have any shape with one label per row of `probs`' last axis."""
    if not isinstance(loss_grad, Tensor):
        loss_grad = constant(np.float32(loss_grad), dtypes.float32)
    attrs = {"ignore_index": ignore_index, "reduction": reduction, "log_prob": False}
    loss, dx = create_op(losses.NLL_WITH_SOFTMAX_GRAD, [probs, labels, loss_grad], attrs)
    return loss, dx
