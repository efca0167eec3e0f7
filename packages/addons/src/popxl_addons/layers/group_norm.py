"""GroupNorm: normalisation over groups of channels of an (N, C, ...) input."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import popxl
from popxl import ops
from popxl.utils import to_numpy
from popxl_addons.core import Module, NamedTensors

__all__ = ["GroupNorm"]


class GroupNorm(Module):
    """Split the channels (axis 1) into `num_groups` groups, normalise each group of each sample to
    mean 0 and variance 1 (with `eps` added to the variance), then scale by `weight` and shift by
    `bias`, both of shape (C,), starting at ones and zeros, with `replica_grouping`.
    """

    def __init__(
        self,
        num_groups: int,
        replica_grouping: popxl.ReplicaGrouping | None = None,
        eps: float = 1e-5,
        cache: bool = False,
    ) -> None:
        super().__init__(cache)
        self.num_groups = num_groups
        self.replica_grouping = replica_grouping
        self.eps = eps

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """The group-normalised `x`, of `x`'s shape (N, C, ...)."""
        channels = x.shape[1]
        self.weight = self.add_variable_input(
            "weight", partial(np.ones, channels, x.dtype.as_numpy()), x.dtype, replica_grouping=self.replica_grouping
        )
        self.bias = self.add_variable_input(
            "bias", partial(np.zeros, channels, x.dtype.as_numpy()), x.dtype, replica_grouping=self.replica_grouping
        )
        return ops.group_norm(x, self.weight, self.bias, num_groups=self.num_groups, eps=self.eps)

    @staticmethod
    def torch_mapping(
        variables: NamedTensors, nn_layer: Any, dtype: popxl.dtype = popxl.float32
    ) -> dict[popxl.Tensor, np.ndarray[Any, Any]]:
        """Variable data taken from a torch.nn.GroupNorm's weight and bias."""
        return {
            variables.weight: to_numpy(nn_layer.weight.data, dtype),
            variables.bias: to_numpy(nn_layer.bias.data, dtype),
        }
