"""Conv2D: a 2-D convolution of an (N, C, H, W) input, with an optional bias."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

import popxl
from popxl import ops
from popxl.ops.conv import PadType
from popxl.utils import to_numpy
from popxl_addons.core import Module, NamedTensors
from popxl_addons.layers.init import TruncatedNormal

__all__ = ["Conv2D"]


class Conv2D(Module):
    """A 2-D convolution (`popxl.ops.conv`) with a (out_channels, C / groups, k_h, k_w) weight and,
    with `bias`, a (1, out_channels, 1, 1) bias added to its output.

    The weight starts from a normal of standard deviation 0.02 truncated at two standard
    deviations, the bias from zeros; both use `replica_grouping`. `kernel_size` is an int (a
    square kernel) or (k_h, k_w). `paddings` is either the explicit pads (begins then ends, four
    values) or a pad type: "same_upper", "same_lower" or "valid". The memory proportions, partials
    types and dithering tune the IPU's convolution and are passed on to `ops.conv`. Once built,
    `weight` and (with a bias) `bias` are the layer's variable inputs.
    """

    def __init__(
        self,
        out_channels: int,
        kernel_size: int | Sequence[int],
        strides: Sequence[int] | None = (1, 1),
        paddings: PadType | Sequence[int] | None = (0, 0, 0, 0),
        dilations: Sequence[int] | None = (1, 1),
        groups: int | None = 1,
        bias: bool = True,
        available_memory_proportions: list[float] | None = None,
        partials_types: list[str] | None = None,
        enable_conv_dithering: list[int] | None = None,
        replica_grouping: popxl.ReplicaGrouping | None = None,
    ) -> None:
        super().__init__()
        self.out_channels = out_channels
        if isinstance(kernel_size, int):
            self.k_h, self.k_w = kernel_size, kernel_size
        else:
            self.k_h, self.k_w = kernel_size
        self.strides = strides
        self.dilations = dilations
        self.groups = groups
        self.pad_type: PadType
        self.paddings: Sequence[int] | None
        if isinstance(paddings, str):
            self.pad_type = paddings
            self.paddings = (0, 0, 0, 0)
        else:
            self.pad_type = "not_set"
            self.paddings = paddings
        self.replica_grouping = replica_grouping
        # popxl-addons replaces this flag by the bias tensor when it builds; the flag itself is kept
        # apart so that the layer builds the same way again.
        self._has_bias = bias
        self.bias: bool | popxl.Tensor = bias
        self.available_memory_proportions = available_memory_proportions
        self.partial_types = partials_types
        self.enable_conv_dithering = enable_conv_dithering

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """The convolution of `x` (N, C, H, W), plus the bias: shape (N, out_channels, H', W')."""
        if x.rank != 4:
            raise ValueError(f"Conv2D expects an input of shape (N, C, H, W), got {x.shape}")
        in_channels = x.shape[1]
        groups = self.groups or 1
        if in_channels % groups:
            raise ValueError(f"Conv2D: {in_channels} input channels do not split into {groups} groups")
        kernel_shape = (self.out_channels, in_channels // groups, self.k_h, self.k_w)
        self.weight = self.add_variable_input(
            "weight",
            TruncatedNormal(kernel_shape, dtype=x.dtype.as_numpy()),
            x.dtype,
            replica_grouping=self.replica_grouping,
        )
        y = ops.conv(
            x,
            self.weight,
            stride=self.strides,
            padding=self.paddings,
            dilation=self.dilations,
            groups=self.groups,
            pad_type=self.pad_type,
            available_memory_proportions=self.available_memory_proportions,
            partials_types=self.partial_types,
            enable_conv_dithering=self.enable_conv_dithering,
        )
        if self._has_bias:
            bias_shape = (1, self.out_channels, *(1,) * (y.rank - 2))
            self.bias = self.add_variable_input(
                "bias",
                partial(np.zeros, bias_shape, x.dtype.as_numpy()),
                x.dtype,
                replica_grouping=self.replica_grouping,
            )
            y = y + self.bias
        return y

    @staticmethod
    def torch_mapping(
        variables: NamedTensors, nn_layer: Any, dtype: popxl.dtype = popxl.float32
    ) -> dict[popxl.Tensor, np.ndarray[Any, Any]]:
        """Variable data taken from a torch.nn.Conv2d (its (out_channels,) bias reshaped to the layer's)."""
        mapping = {variables.weight: to_numpy(nn_layer.weight.data, dtype)}
        if "bias" in variables:
            bias = variables.bias
            mapping[bias] = to_numpy(nn_layer.bias.data.reshape(bias.shape), dtype)
        return mapping
