"""The training data (a synthetic repeating token pattern), each replica's share of it, and the starting
weights."""

from __future__ import annotations

from typing import Any

import numpy as np

import popxl
from gpt_model.config import Array, Config
from gpt_model.layers import GPT
from popxl_addons.layers import Embedding


def synthetic_batches(config: Config) -> list[tuple[Array, Array]]:
    """Per training step, (dp, batch, sequence + 1) tokens: runs of a repeating pattern from random starts."""
    rng = np.random.default_rng(config.seed)
    pattern = rng.permutation(config.vocab)[:24]  # next token = the pattern's next, cyclically
    out = []
    for _ in range(config.training_steps):
        starts = rng.integers(0, len(pattern), (config.dp, config.batch, 1))
        index = (starts + np.arange(config.sequence + 1)) % len(pattern)
        data = pattern[index].astype(np.int32)
        out.append((data[..., :-1], data[..., 1:]))
    return out


def per_replica(config: Config, tokens: Array, labels: Array) -> tuple[Array, Array]:
    """Each replica's (dp * tp, ...) inputs: its data-parallel rank's samples less its vocabulary shard's offset."""
    offsets = Embedding.get_offsets(config.vocab, config.tp)
    shard = config.vocab // config.tp
    t = np.repeat(tokens, config.tp, axis=0) - np.tile(offsets, config.dp)[:, None, None]
    y = np.repeat(labels, config.tp, axis=0) - (np.tile(np.arange(config.tp), config.dp) * shard)[:, None, None]
    return t.astype(np.int32), y.astype(np.int32)


def initial_weights(config: Config) -> dict[str, Array]:
    """The starting weights by the un-phased model's names, with a leading group axis where the tp ranks differ."""
    rng = np.random.default_rng(config.seed + 1)
    ir = popxl.Ir(replication=config.replicas)
    with ir.main_graph:
        factories, _ = GPT(config).create_graph(
            popxl.TensorSpec((config.batch, config.sequence), popxl.int32),
            popxl.TensorSpec((config.batch * config.sequence,), popxl.int32),
        )
    out = {}
    for name, f in factories.to_dict().items():
        groups = f.replica_grouping.num_groups
        shape = (groups, *f.shape) if groups > 1 else tuple(f.shape)
        is_norm = name.rpartition(".")[0].rpartition(".")[2] in ("ln", "ln1", "ln2")
        if is_norm and name.endswith("weight"):
            value = np.ones(shape, np.float32)
        elif name.endswith("bias"):
            value = np.zeros(shape, np.float32)
        else:
            value = rng.normal(0, config.init_std, shape).astype(np.float32)
        out[name] = value.astype(config.dtype.as_numpy())
    return out


def phased_feeds(
    config: Config, session: popxl.Session, streams: dict[str, Any], tokens: Array, labels: Array
) -> dict[Any, Array]:
    """The phased program's host data for one training step of `synthetic_batches`."""
    t, y = per_replica(config, tokens, labels)  # (replicas, batch, ...) -> (steps, replicas, micro, ...)
    t = t.reshape(config.replicas, config.steps, config.micro, config.sequence).swapaxes(0, 1)
    y = y.reshape(config.replicas, config.steps, config.micro * config.sequence).swapaxes(0, 1)
    # As in popxl, a single transfer (one micro-batch a step) takes no transfers axis.
    t = t.reshape(session.host_layout.shape(streams["tokens"].shape))
    y = y.reshape(session.host_layout.shape(streams["labels"].shape))
    return {streams["tokens"]: t, streams["labels"]: y}
