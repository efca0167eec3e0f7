"""Linear: y = x @ weight + bias."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import popxl
from popxl_addons.core import Module
from popxl_addons.layers.init import TruncatedNormal

__all__ = ["Linear"]


class Linear(Module):
    """A dense layer with a (in, out) weight and an optional (out,) bias.

    The weight starts from a normal of standard deviation 0.02 truncated at two
    standard deviations, the bias from zeros; both use `replica_grouping`.
    """

    def __init__(
        self, out_features: int, bias: bool = True, replica_grouping: popxl.ReplicaGrouping | None = None
    ) -> None:
        super().__init__()
        self.out_features = out_features
        self.bias = bias
        self.replica_grouping = replica_grouping

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """`x @ weight (+ bias)`; `x` may have leading batch dimensions."""
        w = self.add_variable_input(
            "weight",
            TruncatedNormal((x.shape[-1], self.out_features), dtype=x.dtype.as_numpy()),
            x.dtype,
            replica_grouping=self.replica_grouping,
        )
        y = x @ w
        if self.bias:
            b = self.add_variable_input(
                "bias",
                partial(np.zeros, (self.out_features,), x.dtype.as_numpy()),
                x.dtype,
                replica_grouping=self.replica_grouping,
            )
            y = y + b
        return y

    @staticmethod
    def torch_mapping(
        variables: Any, nn_layer: Any, dtype: Any = popxl.float32
    ) -> dict[popxl.Tensor, np.ndarray[Any, Any]]:
        """Variable data taken from a torch.nn.Linear (its weight is transposed)."""
        np_dtype = popxl.dtypes.as_dtype(dtype).as_numpy()
        mapping = {variables.weight: nn_layer.weight.data.numpy().T.astype(np_dtype)}
        if "bias" in variables:
            mapping[variables.bias] = nn_layer.bias.data.numpy().astype(np_dtype)
        return mapping
