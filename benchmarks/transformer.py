"""A stack of pre-norm transformer blocks (unmasked multi-head attention, then a 4x GELU MLP) as a popxl_addons
Module over inputs (batch, sequence, hidden), for the planner benchmark.

Each block's attention sits in name scope `attn<i>` and its MLP in `mlp<i>`, so that an activation's
first path component names the sub-layer it belongs to. `jax_stack` is the same stack in JAX, for JAX's
offloading baseline.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import numpy as np
from batch_serialisation import offloaded
from jax.ad_checkpoint import checkpoint_name

import popxl
from popxl import ops
from popxl_addons.core import Module


class TransformerStack(Module):
    def __init__(self, blocks: int, heads: int) -> None:
        super().__init__()
        self.blocks = blocks
        self.heads = heads

    def _weight(
        self, scope: str, name: str, shape: tuple[int, ...], dtype: popxl.dtype, init: Any = np.zeros
    ) -> popxl.Tensor:
        # Zeros (ones for norm scales) stand in for the initial values: the planner's figures do not depend on them.
        return self.add_variable_input(f"{scope}_{name}", partial(init, shape), dtype)

    def _norm(self, scope: str, t: popxl.Tensor) -> popxl.Tensor:
        width = t.shape[-1]
        weight = self._weight(scope, "ln_w", (width,), t.dtype, np.ones)
        return ops.layer_norm(t, weight, self._weight(scope, "ln_b", (width,), t.dtype))

    def _attention(self, scope: str, t: popxl.Tensor, batch: int, seq: int) -> popxl.Tensor:
        width = t.shape[-1]
        head = width // self.heads

        def split_heads(u: popxl.Tensor) -> popxl.Tensor:
            return u.reshape((batch, seq, self.heads, head)).transpose((0, 2, 1, 3))

        h = self._norm(scope, t)
        q, k, v = (split_heads(h @ self._weight(scope, f"w{n}", (width, width), t.dtype)) for n in "qkv")
        scores = ops.softmax((q @ k.transpose((0, 1, 3, 2))) * (1 / math.sqrt(head)), axis=-1)
        mixed = (scores @ v).transpose((0, 2, 1, 3)).reshape((batch * seq, width))
        return t + mixed @ self._weight(scope, "wo", (width, width), t.dtype)

    def _mlp(self, scope: str, t: popxl.Tensor) -> popxl.Tensor:
        width, wide = t.shape[-1], 4 * t.shape[-1]
        h = self._norm(scope, t)
        w1, b1 = self._weight(scope, "w1", (width, wide), t.dtype), self._weight(scope, "b1", (wide,), t.dtype)
        w2, b2 = self._weight(scope, "w2", (wide, width), t.dtype), self._weight(scope, "b2", (width,), t.dtype)
        return t + ops.gelu(h @ w1 + b1) @ w2 + b2

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        batch, seq, width = x.shape
        t = x.reshape((batch * seq, width))
        for i in range(self.blocks):
            with popxl.name_scope(f"attn{i}"):
                t = self._attention(f"attn{i}", t, batch, seq)
            with popxl.name_scope(f"mlp{i}"):
                t = self._mlp(f"mlp{i}", t)
        return t.reshape((batch, seq, width))


def jax_stack(params: list[dict[str, jax.Array]], x: jax.Array, heads: int) -> jax.Array:
    """The same stack in JAX, each activation named "activation" for a checkpoint policy."""
    batch, seq, width = x.shape
    head = width // heads

    def norm(t: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
        mean = t.mean(-1, keepdims=True)
        return (t - mean) * jax.lax.rsqrt(((t - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b

    def split_heads(u: jax.Array) -> jax.Array:
        return u.reshape(batch, seq, heads, head).transpose(0, 2, 1, 3)

    t = x.reshape(batch * seq, width)
    for p in params:
        h = checkpoint_name(norm(t, p["ln1_w"], p["ln1_b"]), "activation")
        q, k, v = (checkpoint_name(split_heads(h @ p[f"w{n}"]), "activation") for n in "qkv")
        scores = checkpoint_name(jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(head), axis=-1), "activation")
        mixed = checkpoint_name((scores @ v).transpose(0, 2, 1, 3).reshape(batch * seq, width), "activation")
        t = checkpoint_name(t + mixed @ p["wo"], "activation")
        h = checkpoint_name(norm(t, p["ln2_w"], p["ln2_b"]), "activation")
        h = checkpoint_name(h @ p["w1"] + p["b1"], "activation")
        h = checkpoint_name(jax.nn.gelu(h, approximate=True), "activation")
        t = checkpoint_name(t + h @ p["w2"] + p["b2"], "activation")
    return t.reshape(batch, seq, width)


def jax_params(blocks: int, width: int, seed: int = 0) -> list[dict[str, np.ndarray[Any, Any]]]:
    """Random parameters of `jax_stack`."""
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray[Any, Any]:
        return rng.normal(0, shape[0] ** -0.5, shape).astype(np.float32)

    out = []
    for _ in range(blocks):
        p = {f"w{n}": w(width, width) for n in "qkvo"}
        p.update(w1=w(width, 4 * width), w2=w(4 * width, width), b1=np.zeros(4 * width, np.float32))
        p.update({k: np.zeros(width, np.float32) for k in ("b2", "ln1_b", "ln2_b")})
        p.update({k: np.ones(width, np.float32) for k in ("ln1_w", "ln2_w")})
        out.append(p)
    return out


def jax_offload(heads: int) -> Callable[[Any, jax.Array, jax.Array], Any]:
    """JAX's offloading scan (batch_serialisation.offloaded) over this stack, every activation to host."""
    return offloaded(partial(jax_stack, heads=heads))
