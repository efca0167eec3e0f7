"""Modules of the built-in cases: the seed's feed-forward block and a small transformer block."""

from __future__ import annotations

import math

import numpy as np

import popxl
from popxl import ops
from popxl_addons.collectives import replicated_all_reduce_identical_grad_inputs, replicated_all_reduce_identical_inputs
from popxl_addons.core import Module
from popxl_addons.layers import LayerNorm, Linear


class FeedForwardTP(Module):
    """A feed-forward block whose first layer is column-sharded over `tp` tensor-parallel replicas."""

    def __init__(self, tp: int, dp: int, hidden: int) -> None:
        super().__init__()
        self.grouping = popxl.gir().replica_grouping(stride=tp, group_size=dp)
        self.fc1 = Linear(hidden // tp, replica_grouping=self.grouping)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """gelu(all-reduce(gelu(fc1(x))) + bias), identical on every member of a TP group."""
        z = replicated_all_reduce_identical_inputs(x, group=self.grouping.transpose())
        z = ops.gelu(self.fc1(z))
        z = replicated_all_reduce_identical_grad_inputs(z, group=self.grouping.transpose())
        bias = self.add_variable_input("bias", lambda: np.zeros(z.shape[-1]), z.dtype)
        return ops.gelu(z + bias)


class NormLinear(Module):
    """LayerNorm followed by a Linear layer."""

    def __init__(self, out_features: int) -> None:
        super().__init__()
        self.norm = LayerNorm()
        self.fc = Linear(out_features)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """fc(norm(x))."""
        y: popxl.Tensor = self.fc(self.norm(x))
        return y


class TransformerBlock(Module):
    """A one-head pre-norm transformer block over a (sequence, hidden) input."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.ln1 = LayerNorm()
        self.qkv = Linear(3 * hidden)
        self.out = Linear(hidden)
        self.ln2 = LayerNorm()
        self.fc1 = Linear(2 * hidden)
        self.fc2 = Linear(hidden)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """x + attention(ln1(x)), then + mlp(ln2(.))."""
        hidden = x.shape[-1]
        qkv = self.qkv(self.ln1(x))
        q = ops.slice(qkv, 0, hidden, axis=1)
        k = ops.slice(qkv, hidden, 2 * hidden, axis=1)
        v = ops.slice(qkv, 2 * hidden, 3 * hidden, axis=1)
        scores = ops.softmax((q @ ops.transpose(k)) * (1 / math.sqrt(hidden)), axis=1)
        x = x + self.out(scores @ v)
        y: popxl.Tensor = x + self.fc2(ops.gelu(self.fc1(self.ln2(x))))
        return y
