"""A stack of pre-norm transformer blocks (unmasked multi-head attention, then a 4x GELU MLP) as a popxl_addons
Module over inputs (batch, sequence, hidden), for the planner benchmark.

Each block's attention sits in name scope `attn<i>` and its MLP in `mlp<i>`, so that an activation's
first path component names the sub-layer it belongs to.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

import popxl
from popxl import ops
from popxl_addons.core import Module


class TransformerStack(Module):
    def __init__(self, blocks: int, heads: int) -> None:
        super().__init__()
        self.blocks = blocks
        self.heads = heads
        self._scope = ""

    def _weight(self, name: str, shape: tuple[int, ...], dtype: popxl.dtype) -> popxl.Tensor:
        # Zeros stand in for the initial values: the planner's figures do not depend on them.
        return self.add_variable_input(f"{self._scope}_{name}", partial(np.zeros, shape), dtype)

    def _norm(self, t: popxl.Tensor, name: str) -> popxl.Tensor:
        width = t.shape[-1]
        weight = self.add_variable_input(f"{self._scope}_{name}_w", partial(np.ones, (width,)), t.dtype)
        return ops.layer_norm(t, weight, self._weight(f"{name}_b", (width,), t.dtype))

    def _attention(self, t: popxl.Tensor, batch: int, seq: int) -> popxl.Tensor:
        width = t.shape[-1]
        head = width // self.heads

        def split_heads(u: popxl.Tensor) -> popxl.Tensor:
            return u.reshape((batch, seq, self.heads, head)).transpose((0, 2, 1, 3))

        h = self._norm(t, "ln")
        q, k, v = (split_heads(h @ self._weight(f"w{n}", (width, width), t.dtype)) for n in "qkv")
        scores = ops.softmax((q @ k.transpose((0, 1, 3, 2))) * (1 / math.sqrt(head)), axis=-1)
        mixed = (scores @ v).transpose((0, 2, 1, 3)).reshape((batch * seq, width))
        return t + mixed @ self._weight("wo", (width, width), t.dtype)

    def _mlp(self, t: popxl.Tensor) -> popxl.Tensor:
        width = t.shape[-1]
        h = self._norm(t, "ln")
        h = ops.gelu(h @ self._weight("w1", (width, 4 * width), t.dtype) + self._weight("b1", (4 * width,), t.dtype))
        return t + h @ self._weight("w2", (4 * width, width), t.dtype) + self._weight("b2", (width,), t.dtype)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        batch, seq, width = x.shape
        t = x.reshape((batch * seq, width))
        for i in range(self.blocks):
            self._scope = f"attn{i}"
            with popxl.name_scope(self._scope):
                t = self._attention(t, batch, seq)
            self._scope = f"mlp{i}"
            with popxl.name_scope(self._scope):
                t = self._mlp(t)
        return t.reshape((batch, seq, width))
