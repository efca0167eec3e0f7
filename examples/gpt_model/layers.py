"""The model's layers: the embeddings, causal self-attention, the feed-forward, a decoder layer, the head,
and the whole model for the un-phased program. Tensor-parallel layers enter and leave through the
tensor-parallel all-reduces (`examples/gpt_phased.py` describes the layout)."""

from __future__ import annotations

import math

import numpy as np

import popxl
import popxl_addons as addons
from gpt_model.config import Config, Groupings
from popxl import ops
from popxl_addons.layers import Embedding, LayerNorm, Linear
from popxl_addons.ops.cross_entropy_sharded_loss import cross_entropy_sharded_loss
from popxl_addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)


class Embeddings(addons.Module):
    """Token embedding (vocabulary sharded over the tensor-parallel replicas) plus a positional table."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.groups = Groupings(config)
        self.word = Embedding(config.dtype, config.vocab, config.width, replica_grouping=self.groups.dp)

    def build(self, tokens: popxl.Tensor) -> popxl.Tensor:
        """(micro, sequence) tokens less this replica's vocabulary offset -> (micro, sequence, width)."""
        x = replicated_all_reduce_identical_grad_inputs(self.word(tokens), group=self.groups.tp)
        shape = (self.config.sequence, self.config.width)
        pos = self.add_variable_input("positional", lambda: np.zeros(shape), x.dtype)
        return x + pos


class Attention(addons.Module):
    """Causal self-attention with this replica's heads: column-sharded QKV, row-sharded output."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.groups = Groupings(config)
        self.local_heads = config.heads // config.tp
        self.qkv = Linear(3 * config.width // config.tp, replica_grouping=self.groups.dp)
        self.out = Linear(config.width, bias=False, replica_grouping=self.groups.dp)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        micro, seq, width = x.shape
        head = width // self.config.heads
        x = replicated_all_reduce_identical_inputs(x, group=self.groups.tp)
        q, k, v = ops.split(self.qkv(x), 3, axis=-1)

        def heads(t: popxl.Tensor) -> popxl.Tensor:
            return ops.transpose(ops.reshape(t, (micro, seq, self.local_heads, head)), (0, 2, 1, 3))

        q, k, v = heads(q), heads(k), heads(v)
        scores = ops.cast(ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))), popxl.float32) * (1 / math.sqrt(head))
        mask = popxl.constant(np.triu(np.full((seq, seq), -1e4, np.float32), 1), popxl.float32)
        probs = ops.cast(ops.softmax(scores + mask, axis=-1), x.dtype)
        z = ops.transpose(ops.matmul(probs, v), (0, 2, 1, 3))
        z = self.out(ops.reshape(z, (micro, seq, self.local_heads * head)))
        z = replicated_all_reduce_identical_grad_inputs(z, group=self.groups.tp)
        bias = self.add_variable_input("bias", lambda: np.zeros(width), z.dtype)
        return z + bias


class FeedForward(addons.Module):
    """A GELU MLP of four times the width: column-sharded up, row-sharded down."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.groups = Groupings(config)
        self.up = Linear(4 * config.width // config.tp, replica_grouping=self.groups.dp)
        self.down = Linear(config.width, bias=False, replica_grouping=self.groups.dp)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        x = replicated_all_reduce_identical_inputs(x, group=self.groups.tp)
        z = replicated_all_reduce_identical_grad_inputs(self.down(ops.gelu(self.up(x))), group=self.groups.tp)
        bias = self.add_variable_input("bias", lambda: np.zeros(z.shape[-1]), z.dtype)
        return z + bias


class DecoderLayer(addons.Module):
    """Pre-norm: x + attention(ln1(x)), then + feed_forward(ln2(x))."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.ln1, self.ln2 = LayerNorm(), LayerNorm()
        self.attention = Attention(config)
        self.feed_forward = FeedForward(config)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        rows = (x.shape[0] * x.shape[1], x.shape[2])
        x = x + self.attention(ops.reshape(self.ln1(ops.reshape(x, rows)), x.shape))
        out: popxl.Tensor = x + self.feed_forward(ops.reshape(self.ln2(ops.reshape(x, rows)), x.shape))
        return out


class Head(addons.Module):
    """Final layer norm, the vocabulary-sharded logits and the sharded cross-entropy (float32) of a micro-batch."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.groups = Groupings(config)
        self.ln = LayerNorm()
        self.logits = Linear(config.vocab // config.tp, bias=False, replica_grouping=self.groups.dp)

    def build(self, x: popxl.Tensor, labels: popxl.Tensor) -> popxl.Tensor:
        """(micro, sequence, width), (micro * sequence,) labels less this replica's vocabulary offset -> loss."""
        h = self.ln(ops.reshape(x, (x.shape[0] * x.shape[1], x.shape[2])))
        h = replicated_all_reduce_identical_inputs(h, group=self.groups.tp)
        logits = ops.cast(self.logits(h), popxl.float32)
        return cross_entropy_sharded_loss(logits, labels, replica_grouping=self.groups.tp)


class GPT(addons.Module):
    """The whole model, for the un-phased program."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.embeddings = Embeddings(config)
        self.layers = [DecoderLayer(config) for _ in range(config.layers)]
        for i, layer in enumerate(self.layers):
            setattr(self, f"layer{i}", layer)
        self.head = Head(config)

    def build(self, tokens: popxl.Tensor, labels: popxl.Tensor) -> popxl.Tensor:
        x = self.embeddings(tokens)
        for layer in self.layers:
            x = layer(x)
        loss: popxl.Tensor = self.head(x, labels)
        return loss
