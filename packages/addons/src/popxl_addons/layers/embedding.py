"""Embedding: a table lookup, optionally with its vocabulary sharded across replicas."""

from __future__ import annotations

from math import ceil
from typing import Any

import numpy as np

import popxl
from popxl import ops
from popxl_addons.core import Module
from popxl_addons.layers.init import TruncatedNormal

__all__ = ["MULTISLICE_MAGIC_NUMBER", "Embedding"]

# Each shard of the vocabulary is padded to a multiple of this (the IPU's multi-slice
# libraries prefer such sizes, so popxl-addons pads to it with or without sharding).
MULTISLICE_MAGIC_NUMBER = 16


class Embedding(Module):
    """Rows of a (vocab_shard_size, hidden_size) weight selected by integer indices.

    The weight starts from a normal of standard deviation 0.02 truncated at two standard
    deviations. With a `replica_grouping` of more than one group the vocabulary is split into
    `num_groups` shards of `vocab_shard_size` rows, one per group (the weight's host data has a
    leading group axis); the indices a replica receives must already have its shard's offset
    (`get_offsets`) subtracted, and indices outside its shard give zeros, so that summing the
    replicas' outputs over the shards gives the full lookup.
    """

    def __init__(
        self,
        dtype: popxl.dtype,
        vocab_size: int,
        hidden_size: int,
        axis: int = 0,
        replica_grouping: popxl.ReplicaGrouping | None = None,
    ) -> None:
        super().__init__()
        self.dtype = dtype
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.axis = axis
        self.replica_grouping = replica_grouping
        self.n_shards = replica_grouping.num_groups if replica_grouping else 1
        self.vocab_shard_size = self.get_vocab_shard_size(vocab_size, self.n_shards)
        self.offsets = self.get_offsets(vocab_size, self.n_shards)

    @staticmethod
    def get_vocab_shard_size(vocab_size: int, n_shards: int) -> int:
        """Rows per shard: `vocab_size / n_shards` rounded up, then up to a multiple of 16."""
        rows = ceil(vocab_size / n_shards)
        return MULTISLICE_MAGIC_NUMBER * ceil(rows / MULTISLICE_MAGIC_NUMBER)

    @staticmethod
    def get_offsets(vocab_size: int, n_shards: int) -> np.ndarray[Any, Any]:
        """The first vocabulary index of each shard: 0, shard size, twice the shard size, and so on"""
        size = Embedding.get_vocab_shard_size(vocab_size, n_shards)
        return np.arange(0, n_shards * size, size)

    def build(self, indices: popxl.Tensor) -> popxl.Tensor:
        """The weight's entries at `indices` along `axis`: shape `indices.shape + (hidden_size,)` for axis 0.

        With a sharded vocabulary, `indices` are relative to this replica's shard and those
        outside it select zeros.
        """
        self.weight = self.add_variable_input(
            "weight",
            TruncatedNormal((self.vocab_shard_size, self.hidden_size), dtype=self.dtype.as_numpy()),
            self.dtype,
            replica_grouping=self.replica_grouping,
        )
        return ops.gather(self.weight, indices, axis=self.axis, zero_OOR=self.n_shards > 1)
