"""An Adam (AdamW) optimizer step as a Module, with popxl-addons' options."""

from __future__ import annotations

import math
from functools import partial

import numpy as np

import popxl
from popxl import ops
from popxl_addons.core.modules.module import Module
from popxl_addons.core.modules.variable_factory import Filled

__all__ = ["AdamOptimizerStep"]


class AdamOptimizerStep(Module):
    """One Adam step on `var` from `grad`, its moments (and step count) as the module's variables.

    With `m`, `v` the moving averages of the gradient and of its square
    (`beta1`, `beta2`), `t` the step (counted from 1, when `bias_correction`):
    `var -= lr * (m̂ / (sqrt(v̂) + eps) + weight_decay * var)`, `m̂ = m / (1 - beta1**t)`,
    `v̂ = v / (1 - beta2**t)` — decoupled weight decay (AdamW). The gradient is
    first divided by `loss_scaling`, and scaled by `global_norm_max / max(global_norm,
    global_norm_max)` when a `global_norm` is given. The first moment is kept in
    `first_order_dtype` (float16 by default), the second in float32; a float16 first moment has
    popart's float16 arithmetic (the gradient cast to float16, float16 factors and bias correction,
    and, without weight decay, a float16 update term), so it is PyTorch's AdamW to float16 precision.
    A replica-sharded `var` gets moments sharded the same way.
    """

    @popxl.in_sequence()
    def build(
        self,
        var: popxl.TensorByRef,
        grad: popxl.Tensor,
        replica_grouping: popxl.ReplicaGrouping | None = None,
        *,
        lr: float | popxl.Tensor,
        beta1: float | popxl.Tensor = 0.9,
        beta2: float | popxl.Tensor = 0.999,
        eps: float | popxl.Tensor = 1e-5,
        weight_decay: float | popxl.Tensor = 1e-2,
        first_order_dtype: popxl.dtype = popxl.float16,
        bias_correction: bool = True,
        loss_scaling: float | popxl.Tensor = 1,
        global_norm: popxl.Tensor | None = None,
        global_norm_max: float | popxl.Tensor | None = None,
    ) -> None:
        """Add the optimizer state and update `var` in place."""
        grad = self._scaled(grad, loss_scaling, global_norm, global_norm_max)
        if var.meta_shape:
            shard_over = math.prod(var.meta_shape) // math.prod(var.shape)
            moment = partial(self.add_replica_sharded_variable_input, shard_over=shard_over)
            shape = var.meta_shape
        else:
            moment = self.add_variable_input  # type: ignore[assignment]
            shape = var.shape
        first = moment(
            "first_order",
            Filled(shape, first_order_dtype.as_numpy()),
            first_order_dtype,
            replica_grouping=replica_grouping,
            by_ref=True,
        )
        second = moment(
            "second_order",
            Filled(shape, np.float32),
            popxl.float32,
            replica_grouping=replica_grouping,
            by_ref=True,
        )
        ops.var_updates.accumulate_moving_average_(first, grad, f=beta1)
        ops.var_updates.accumulate_moving_average_square_(second, grad, f=beta2)
        step = None
        if bias_correction:
            step = self.add_variable_input("step", partial(np.zeros, (), np.float32), popxl.float32, by_ref=True)
        updater = ops.var_updates.adam_updater(
            first,
            second,
            weight=var,
            weight_decay=weight_decay,
            time_step=step,
            beta1=beta1,
            beta2=beta2,
            epsilon=eps,
        )
        ops.scaled_add_(var, updater, b=_negated(lr))

    @staticmethod
    def _scaled(
        grad: popxl.Tensor,
        loss_scaling: float | popxl.Tensor,
        global_norm: popxl.Tensor | None,
        global_norm_max: float | popxl.Tensor | None,
    ) -> popxl.Tensor:
        scale: float | popxl.Tensor = 1
        if isinstance(loss_scaling, popxl.Tensor) or loss_scaling != 1:
            scale = 1 / loss_scaling
        if global_norm is not None:
            if global_norm_max is None:
                raise ValueError("global_norm_max must be given with global_norm")
            limit = global_norm_max
            if not isinstance(limit, popxl.Tensor):
                limit = popxl.constant(limit, popxl.float32)
            scale = (scale * limit) / ops.maximum(global_norm, limit)
        if isinstance(scale, popxl.Tensor) or scale != 1:
            grad = ops.cast(grad, popxl.float32) * scale
        return grad


def _negated(lr: float | popxl.Tensor) -> float | popxl.Tensor:
    return -lr
