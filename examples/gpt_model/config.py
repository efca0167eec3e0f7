"""The model's sizes, the replica layout and the training run (`Config`), and the replica groupings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

import popxl

Array = np.ndarray[Any, Any]

jax.config.update("jax_num_cpu_devices", 8)  # type: ignore[no-untyped-call]  # before JAX initialises: one CPU device per replica


@dataclass(frozen=True)
class Config:
    """The model, the replica layout and the training run."""

    vocab: int = 128
    width: int = 32
    heads: int = 4
    layers: int = 2
    sequence: int = 16
    tp: int = 4
    dp: int = 2
    micro: int = 4  # sequences per micro-batch and replica
    steps: int = 2  # micro-batches per training step
    training_steps: int = 8
    lr: float = 1e-2
    clip: float = 1.0  # the global gradient norm's limit
    init_std: float = 0.05
    seed: int = 0
    float16: bool = True

    @property
    def replicas(self) -> int:
        return self.tp * self.dp

    @property
    def dtype(self) -> popxl.dtype:
        return popxl.float16 if self.float16 else popxl.float32

    @property
    def loss_scaling(self) -> float:
        return 256.0 if self.float16 else 1.0

    @property
    def batch(self) -> int:
        """Sequences per training step and data-parallel replica."""
        return self.micro * self.steps


class Groupings:
    """The replica groupings: over the tensor-parallel members, and the data-parallel one of sharded variables."""

    def __init__(self, config: Config) -> None:
        ir = popxl.gir()
        self.dp = ir.replica_grouping(stride=config.tp, group_size=config.dp)
        self.tp = self.dp.transpose()
