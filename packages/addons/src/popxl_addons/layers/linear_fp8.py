"""LinearFP8: popxl-addons' dense layer whose matmuls take float8 operands.

Forward, `x` and the weight are cast to `popxl.float8_143` with power-of-two scales chosen by
`scale_metric` ("amax": `fp8_amax_scale`, "mse": `fp8_mse_scale`, "manual_scale": the int `scale`
for both), and `matmul_pow2scaled` undoes the scales on its float16 result (cast to float32 for a
float32 `x`) before the bias is added. The layer writes its own gradient: the incoming gradient is cast
to `popxl.float8_152` with its scale less 3 (headroom against overflow in the matmuls, clipped to
[-31, 31]), and both gradient matmuls reuse the forward's float8 tensors and scales; the bias gradient
is the incoming gradient summed over the batch. As in popxl-addons, `x` is (batch, in_features).
For a float32 `x` the float16 gradients are cast to float32 here, so that they match their variables.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import popxl
from popxl import ops
from popxl_addons.core import Module, WeightsDict, fp8_amax_scale, fp8_mse_scale
from popxl_addons.layers.init import TruncatedNormal

__all__ = ["LinearFP8"]

# Subtracted from the incoming gradient's scale, as popxl-addons does.
GRAD_SCALE_MARGIN = 3


class LinearFP8(Module):
    """A dense layer with a (in, out) weight and an optional (out,) bias, multiplied in float8.

    The weight starts from a normal of standard deviation 0.02 truncated at two standard deviations,
    the bias from zeros; both use `replica_grouping`.
    """

    def __init__(
        self,
        out_features: int,
        bias: bool = True,
        scale_metric: str = "amax",
        scale: int = 0,
        replica_grouping: popxl.ReplicaGrouping | None = None,
    ) -> None:
        super().__init__()
        self.out_features = out_features
        self.bias = bias
        self.replica_grouping = replica_grouping
        self.scale_metric = scale_metric
        self.scale = scale
        self.forward_fp8_type = popxl.float8_143
        self.grad_fp8_type = popxl.float8_152
        metrics: dict[str, Callable[[popxl.Tensor, popxl.dtype], popxl.Tensor]] = {
            "amax": fp8_amax_scale,
            "mse": fp8_mse_scale,
            "manual_scale": self._manual_scale,
        }
        if scale_metric not in metrics:
            raise ValueError(
                f"The scale_metric option {scale_metric} is not available. "
                "Please provide one of the following options: amax, mse or manual_scale."
            )
        self.fp8_scale = metrics[scale_metric]

    def _manual_scale(self, t: popxl.Tensor, dtype: popxl.dtype) -> popxl.Tensor:
        return popxl.constant(self.scale, popxl.int32)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """`x @ weight (+ bias)` with both operands cast to float8 1.4.3; `x` is (batch, in_features)."""
        w = self.add_variable_input(
            "weight",
            TruncatedNormal((x.shape[-1], self.out_features), dtype=x.dtype.as_numpy()),
            x.dtype,
            replica_grouping=self.replica_grouping,
        )
        w_log2scale = self.fp8_scale(w, self.forward_fp8_type)
        w_fp8 = ops.pow2scale_cast_to_fp8(w, data_type=self.forward_fp8_type, log2_scale=w_log2scale)
        x_log2scale = self.fp8_scale(x, self.forward_fp8_type)
        x_fp8 = ops.pow2scale_cast_to_fp8(x, data_type=self.forward_fp8_type, log2_scale=x_log2scale)
        self.aux["w_log2scale"] = w_log2scale
        self.aux["w_fp8"] = w_fp8
        self.aux["x_log2scale"] = x_log2scale
        self.aux["x_fp8"] = x_fp8
        self.aux["dtype"] = x.dtype
        y = ops.matmul_pow2scaled(x_fp8, w_fp8, log2_scale=-w_log2scale - x_log2scale)
        if x.dtype == popxl.float32:
            y = ops.cast(y, popxl.float32)
        if self.bias:
            b = self.add_variable_input(
                "bias",
                partial(np.zeros, (self.out_features,), x.dtype.as_numpy()),
                x.dtype,
                replica_grouping=self.replica_grouping,
            )
            y = y + b
        return y

    def build_grad(self, dLdy: popxl.Tensor) -> popxl.Tensor:
        """dL/dx from dL/dy, with the weight's (and bias') gradients set in `var_grad`."""
        dtype: popxl.dtype = self.aux["dtype"]
        dLdy_log2scale = self.fp8_scale(dLdy, self.grad_fp8_type) - popxl.constant(GRAD_SCALE_MARGIN, popxl.int32)
        dLdy_log2scale = ops.clip(dLdy_log2scale, -31, 31)
        dLdy_fp8 = ops.pow2scale_cast_to_fp8(dLdy, data_type=self.grad_fp8_type, log2_scale=dLdy_log2scale)
        dLdx = ops.matmul_pow2scaled(
            dLdy_fp8, self.aux["w_fp8"].T, log2_scale=-self.aux["w_log2scale"] - dLdy_log2scale
        )
        dLdw = ops.matmul_pow2scaled(
            dLdy_fp8.T, self.aux["x_fp8"], log2_scale=-self.aux["x_log2scale"] - dLdy_log2scale
        ).T
        if dtype != popxl.float16:
            dLdx, dLdw = ops.cast(dLdx, dtype), ops.cast(dLdw, dtype)
        self.var_grad["weight"] = dLdw
        if self.bias:
            self.var_grad["bias"] = ops.sum(dLdy, 0)
        return dLdx

    @staticmethod
    def torch_mapping(variables: Any, nn_layer: Any, dtype: popxl.dtype = popxl.float32) -> WeightsDict:
        """Variable data taken from a torch.nn.Linear (its weight is transposed)."""
        np_dtype = dtype.as_numpy()
        mapping = WeightsDict({variables.weight: nn_layer.weight.data.numpy().T.astype(np_dtype)})
        if "bias" in variables:
            mapping[variables.bias] = nn_layer.bias.data.numpy().astype(np_dtype)
        return mapping
