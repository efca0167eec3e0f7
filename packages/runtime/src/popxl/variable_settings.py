"""popart's `VariableSettings`: a constant replica grouping with the way its variables come back to the host.

popxl describes a variable's replica grouping to popart as `VariableSettings(stride, group_size,
retrieval_mode)` (`ReplicaGrouping._to_variable_settings`), and popxl's own tests ask it which replicas
form each group. Only that form exists here; popart's `CommGroup` forms describe the same groupings.
"""

from __future__ import annotations

import enum


class VariableRetrievalMode(enum.Enum):
    """Which replicas' values of a grouped variable come back to the host (popart's names)."""

    OnePerGroup = 0
    AllReduceReplicas = 1
    AllReplicas = 2


class VariableSettings:
    """Groups of `groupSize` replicas whose members are `stride` apart, and how their values are retrieved."""

    def __init__(self, stride: int, groupSize: int, mode: VariableRetrievalMode) -> None:
        if stride < 1 or groupSize < 1:
            raise ValueError(f"VariableSettings needs a positive stride and group size, got {stride} and {groupSize}")
        self._stride, self._group_size, self._mode = int(stride), int(groupSize), mode

    def isUsingCommGroup(self) -> bool:
        """False: these settings are a stride and a group size, not a popart CommGroup."""
        return False

    def getStride(self) -> int:
        """The distance between consecutive members of a group."""
        return self._stride

    def getGroupSize(self) -> int:
        """The number of replicas in each group."""
        return self._group_size

    def getRetrievalMode(self) -> VariableRetrievalMode:
        """Which replicas' values come back to the host."""
        return self._mode

    def getRealGroupSize(self, replicaCount: int) -> int:
        """The number of replicas in each group of `replicaCount` replicas."""
        self._check(replicaCount)
        return self._group_size

    def getGroupCount(self, replicaCount: int) -> int:
        """The number of groups `replicaCount` replicas form."""
        self._check(replicaCount)
        return replicaCount // self._group_size

    def getGroupRepresentative(self, group: int) -> int:
        """The first replica of group `group`."""
        span = self._stride * self._group_size
        return (group // self._stride) * span + group % self._stride

    def numReplicasReturningVariable(self, replicaCount: int) -> int:
        """How many of `replicaCount` replicas' values come back to the host."""
        if self._mode is VariableRetrievalMode.AllReplicas:
            return replicaCount
        return self.getGroupCount(replicaCount)

    def groups(self, replicaCount: int) -> list[list[int]]:
        """Each group's replicas, in rank order, groups in order."""
        return [
            [self.getGroupRepresentative(g) + k * self._stride for k in range(self._group_size)]
            for g in range(self.getGroupCount(replicaCount))
        ]

    def _check(self, replicaCount: int) -> None:
        if replicaCount % (self._stride * self._group_size):
            raise ValueError(
                f"VariableSettings(stride={self._stride}, groupSize={self._group_size}) does not tile "
                f"{replicaCount} replicas"
            )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VariableSettings):
            return NotImplemented
        return (self._stride, self._group_size, self._mode) == (other._stride, other._group_size, other._mode)

    def __hash__(self) -> int:
        return hash((self._stride, self._group_size, self._mode))

    def __repr__(self) -> str:
        return f"VariableSettings(stride={self._stride}, groupSize={self._group_size}, mode={self._mode.name})"
