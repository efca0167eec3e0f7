"""popxl's names for where a tensor is stored and when a fragment of a program runs.

They describe IPU memory (tile memory or streaming memory, tile sets) and
popart's program fragments; here they are values users may pass around and
compare. Where state lives on this runtime is set by the Session's
`remote_memory` (see docs/runtime.md).
"""

from __future__ import annotations

import enum


class TensorStorage(enum.Enum):
    """On-chip (tile memory) or off-chip (streaming memory) storage."""

    OnChip = "OnChip"
    OffChip = "OffChip"


class ReplicatedTensorSharding(enum.Enum):
    """Whether a tensor is sharded over replicas."""

    On = "On"
    Off = "Off"


class TileSet(enum.Enum):
    """popart's tile sets: compute tiles, IO tiles, or not yet decided."""

    Compute = 0
    IO = 1
    Undefined = 2


class ExecutionContext(enum.Enum):
    """popart's program fragments."""

    Normal = 0
    AccumulateOuterFragment = 1
    WeightsFromHostFragment = 2
    WeightsToHostFragment = 3
    OptimizerFromHostFragment = 4
    Subgraph = 5
    Undefined = 6


class TensorLocation:
    """The storage and sharding of one or several tensors."""

    def __init__(
        self,
        storage: TensorStorage = TensorStorage.OnChip,
        replicated_tensor_sharding: ReplicatedTensorSharding = ReplicatedTensorSharding.Off,
    ) -> None:
        self._storage = storage
        self._replicated_tensor_sharding = replicated_tensor_sharding

    @property
    def storage(self) -> TensorStorage:
        """Where the tensors are stored."""
        return self._storage

    @property
    def replicated_tensor_sharding(self) -> ReplicatedTensorSharding:
        """Whether the tensors are sharded over replicas."""
        return self._replicated_tensor_sharding

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorLocation):
            return NotImplemented
        return (self.storage, self.replicated_tensor_sharding) == (other.storage, other.replicated_tensor_sharding)

    def __hash__(self) -> int:
        return hash((self.storage, self.replicated_tensor_sharding))

    def __repr__(self) -> str:
        return f"TensorLocation({self.storage}, {self.replicated_tensor_sharding})"
