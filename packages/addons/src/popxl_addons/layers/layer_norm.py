"""LayerNorm over the last axis of a 2-D input."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import popxl
from popxl import ops
from popxl.utils import to_numpy
from popxl_addons.core import Module, NamedTensors, WeightsDict

__all__ = ["LayerNorm"]


class LayerNorm(Module):
    """Normalise each row of an (N, C) input, then scale by `weight` and shift by `bias`."""

    def build(self, x: popxl.Tensor, eps: float = 1e-5) -> popxl.Tensor:
        """`(x - mean) / sqrt(var + eps) * weight + bias`, per row."""
        if x.rank != 2:
            raise ValueError(f"The input tensor must be of shape N x C, got {x.shape}")
        c = x.shape[-1]
        w = self.add_variable_input("weight", partial(np.ones, (c,), x.dtype.as_numpy()), x.dtype)
        b = self.add_variable_input("bias", partial(np.zeros, (c,), x.dtype.as_numpy()), x.dtype)
        return ops.layer_norm(x, w, b, eps)

    @staticmethod
    def torch_mapping(variables: NamedTensors, nn_layer: Any, dtype: popxl.dtype = popxl.float32) -> WeightsDict:
        """Variable data taken from a torch.nn.LayerNorm's weight and bias; a layer normalising over several
        trailing axes maps onto them flattened into one, as this layer's input is."""
        weight, bias = nn_layer.weight.data, nn_layer.bias.data
        return WeightsDict(
            {
                variables.weight: to_numpy(weight.reshape(variables.weight.shape), dtype),
                variables.bias: to_numpy(bias.reshape(variables.bias.shape), dtype),
            }
        )
