"""LinearGQ: popxl-addons' dense layer whose weight is stored 4-bit group-quantised.

The (in, out) weight is held as three variables: `weight_compressed`, uint16 words of four 4-bit ids,
and `weight_decompression_scale` and `weight_decompression_bias`, one per group, of `x`'s type. The
groups run along `dim` of the weight: along its out axis for `dim` -1 or 1 (the variables then have
shape (in, out / group_size, ...)), along its in axis for `dim` 0 (shape (out, in / group_size, ...)).
Each call decompresses the weight (`group_quantize_decompress`) and computes `x @ weight (+ bias)`.
The variables start as zeros; `torch_mapping` compresses a torch.nn.Linear's weight into them with
`group_quantize_compress_numpy`.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import popxl
from popxl_addons.core import Module, WeightsDict, group_quantize_compress_numpy, group_quantize_decompress
from popxl_addons.core.ops.group_quantize import IDS_PER_WORD

__all__ = ["LinearGQ"]


class LinearGQ(Module):
    """A dense layer whose (in, out) weight is stored as 4-bit ids in groups of `group_size` along `dim`,
    with a float scale and bias per group, and an optional (out,) bias; all use `replica_grouping`."""

    def __init__(
        self,
        out_features: int,
        bias: bool = True,
        replica_grouping: popxl.ReplicaGrouping | None = None,
        group_size: int = 0,
        dim: int = -1,
    ) -> None:
        super().__init__()
        if dim not in (-1, 0, 1):
            raise ValueError(f"LinearGQ quantises its (in, out) weight along dim 0, 1 or -1, got {dim}")
        self.out_features = out_features
        self.bias = bias
        self.replica_grouping = replica_grouping
        self.group_size = group_size
        self.dim = dim

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """`x @ weight (+ bias)` with the weight decompressed from its groups."""
        in_features = x.shape[-1]
        kept, grouped = (self.out_features, in_features) if self.dim == 0 else (in_features, self.out_features)
        if self.group_size <= 0 or self.group_size % IDS_PER_WORD or grouped % self.group_size:
            raise ValueError(
                f"LinearGQ: group_size must be a positive multiple of {IDS_PER_WORD} that divides the quantised "
                f"axis ({grouped}), got {self.group_size}"
            )
        groups = grouped // self.group_size
        w_compressed = self.add_variable_input(
            "weight_compressed",
            partial(np.zeros, (kept, groups, self.group_size // IDS_PER_WORD), np.uint16),
            popxl.uint16,
            replica_grouping=self.replica_grouping,
        )
        w_scale = self.add_variable_input(
            "weight_decompression_scale",
            partial(np.zeros, (kept, groups, 1), x.dtype.as_numpy()),
            x.dtype,
            replica_grouping=self.replica_grouping,
        )
        w_bias = self.add_variable_input(
            "weight_decompression_bias",
            partial(np.zeros, (kept, groups, 1), x.dtype.as_numpy()),
            x.dtype,
            replica_grouping=self.replica_grouping,
        )
        w = group_quantize_decompress(w_compressed, w_scale, w_bias, self.dim)
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
        variables: Any, nn_layer: Any, dtype: popxl.dtype = popxl.float32, group_size: int = 64, dim: int = -1
    ) -> WeightsDict:
        """Variable data from a torch.nn.Linear: its (transposed) weight compressed in groups of `group_size`
        along `dim`; the scales, biases and layer bias in `dtype`."""
        np_dtype = dtype.as_numpy()
        packed, scale, bias = group_quantize_compress_numpy(nn_layer.weight.detach().numpy().T, group_size, dim=dim)
        mapping = WeightsDict(
            {
                variables.weight_compressed: packed,
                variables.weight_decompression_scale: scale.astype(np_dtype),
                variables.weight_decompression_bias: bias.astype(np_dtype),
            }
        )
        if "bias" in variables:
            mapping[variables.bias] = nn_layer.bias.detach().numpy().astype(np_dtype)
        return mapping
