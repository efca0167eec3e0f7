"""Replica groupings: how the replicas of a program split into groups."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from popxl.ir import Ir
    from popxl.variable_settings import VariableSettings


class ReplicaGrouping:
    """Groups of `group_size` replicas, members `stride` apart.

    Replica r belongs to group `(r // (s*G))*s + r % s` with rank
    `(r % (s*G)) // s`, for stride s and group size G.
    """

    def __init__(self, ir: Ir, stride: int = 1, group_size: int | None = None) -> None:
        n = ir.replication_factor
        if not 0 < stride <= n or n % stride:
            raise ValueError(f"Replica grouping stride {stride} must divide the replication factor {n}")
        group_size = n // stride if group_size is None else group_size
        if not 0 < group_size <= n:
            raise ValueError(f"Replica grouping group_size {group_size} must be in [1, {n}]")
        if group_size == 1:
            stride = 1
        if n % (stride * group_size):
            raise ValueError(
                f"Replica grouping (stride={stride}, group_size={group_size}) does not tile the replication factor {n}"
            )
        self._ir = ir
        self._n = n
        self._stride = stride
        self._group_size = group_size
        self._assignment: tuple[int, ...] | None = None

    @classmethod
    def _from_assignment(cls, ir: Ir, assignment: list[int]) -> ReplicaGrouping:
        g = cls.__new__(cls)
        g._ir, g._n = ir, len(assignment)
        g._stride, g._group_size = 0, assignment.count(0)
        g._assignment = tuple(assignment)
        return g

    @property
    def stride(self) -> int:
        """Distance between consecutive members of a group."""
        if not self.is_const:
            raise NotImplementedError(f"{self} has no constant stride")
        return self._stride

    @property
    def group_size(self) -> int:
        """Number of replicas in each group."""
        return self._group_size

    @property
    def num_groups(self) -> int:
        """Number of groups."""
        return self._n // self._group_size

    @property
    def replication_factor(self) -> int:
        """Number of replicas the grouping covers."""
        return self._n

    @property
    def is_const(self) -> bool:
        """Whether the members of each group are a constant stride apart."""
        return self._assignment is None

    @property
    def assignment(self) -> list[int]:
        """The group of each replica, in replica order."""
        if self._assignment is not None:
            return list(self._assignment)
        return [self.group_of(r) for r in range(self._n)]

    def group_of(self, replica: int) -> int:
        """The group replica `replica` belongs to."""
        if self._assignment is not None:
            return self._assignment[replica]
        s, g = self._stride, self._group_size
        return (replica // (s * g)) * s + replica % s

    def rank_of(self, replica: int) -> int:
        """The position of `replica` within its group."""
        if self._assignment is not None:
            return self.members(self._assignment[replica]).index(replica)
        s, g = self._stride, self._group_size
        return (replica % (s * g)) // s

    @property
    def const_rg(self) -> ReplicaGrouping:
        """This grouping if its stride is constant; otherwise popxl's constant-stride grouping that splits its
        groups: the smallest stride between members, and the greatest size dividing every split group."""
        if self.is_const:
            return self
        assignment = self.assignment
        gaps = {b - a for g in set(assignment) for a, b in itertools.pairwise(self.members(g))}
        stride = min(gaps)
        split = list(assignment)
        fresh = max(assignment)
        for g in set(assignment):
            members = self.members(g)
            moved = False
            for a, b in itertools.pairwise(members):
                if b - a > stride:
                    moved = True
                    fresh += 1
                if moved:
                    split[b] = fresh
        size = math.gcd(*(split.count(g) for g in set(split)))
        return ReplicaGrouping(self._ir, stride if size > 1 else 1, size)

    @property
    def to_device_map(self) -> list[int] | None:
        """For each group of `const_rg`, the group of this grouping it belongs to (None when constant)."""
        return None if self.is_const else self._maps()[0]

    @property
    def to_host_map(self) -> list[int] | None:
        """For each group of this grouping, its first group in `const_rg` (None when constant)."""
        return None if self.is_const else self._maps()[1]

    def _maps(self) -> tuple[list[int], list[int]]:
        to_device: dict[int, int] = {}
        to_host: dict[int, int] = {}
        for const, own in zip(self.const_rg.assignment, self.assignment):
            to_device.setdefault(const, own)
            to_host.setdefault(own, const)
        return list(to_device.values()), list(to_host.values())

    def _to_variable_settings(self, retrieval_mode: str | None = None) -> VariableSettings:
        """popart's description of this grouping (a constant one) with `retrieval_mode` ("one_per_group", the
        default, or "all_replicas")."""
        from popxl.variable_settings import VariableRetrievalMode, VariableSettings

        if not self.is_const:
            raise NotImplementedError(f"{self} has no constant stride, so no popart VariableSettings")
        modes = {
            None: VariableRetrievalMode.OnePerGroup,
            "one_per_group": VariableRetrievalMode.OnePerGroup,
            "all_replicas": VariableRetrievalMode.AllReplicas,
        }
        if retrieval_mode not in modes:
            raise ValueError(f"Invalid retrieval_mode: {retrieval_mode!r} (one_per_group or all_replicas)")
        return VariableSettings(self._stride, self._group_size, modes[retrieval_mode])

    def members(self, group: int) -> list[int]:
        """The replicas of group `group`, in rank order."""
        return [r for r in range(self._n) if self.group_of(r) == group]

    def transpose(self) -> ReplicaGrouping:
        """The grouping of first members of each group, then second members, and so on."""
        if self.is_const and (self._stride == 1 or self._stride * self._group_size == self._n):
            stride = 1 if self._stride > 1 else self._group_size
            return ReplicaGrouping(self._ir, stride=stride, group_size=self.num_groups)
        assignment = [0] * self._n
        for g in range(self.num_groups):
            for k, r in enumerate(self.members(g)):
                assignment[r] = k
        return ReplicaGrouping._from_assignment(self._ir, assignment)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ReplicaGrouping):
            raise TypeError(f"Cannot compare a ReplicaGrouping with {type(other).__name__}")
        return self._ir is other._ir and self.assignment == other.assignment

    def __hash__(self) -> int:
        return hash((id(self._ir), tuple(self.assignment)))

    def __repr__(self) -> str:
        """As popxl writes a grouping."""
        if self.is_const:
            return (
                f"ReplicaGrouping(num_replicas={self._n}, stride={self._stride}, group_size={self._group_size}, "
                f"num_groups={self.num_groups})"
            )
        return f"ReplicaGrouping(assignment={self.assignment})"


def grouping_from_assignments(ir: Ir, assignment: list[int]) -> ReplicaGrouping:
    """`ir.replica_grouping_from_assignments(assignment)`: the assignment checked, as a constant-stride grouping
    where it is one."""
    assignment = [int(a) for a in assignment]
    n = ir.replication_factor
    groups = sorted(set(assignment))
    sizes = {g: assignment.count(g) for g in groups}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"All groups should have the same size but they dont. (Group, Sizes): {sorted(sizes.items())}")
    if groups != list(range(len(groups))):
        raise ValueError(f"The group numbers are not numbered consecutively and/or do not start at 0. Groups: {groups}")
    if list(dict.fromkeys(assignment)) != groups:
        raise ValueError(
            "When ordered by first appearance, the group numbers are not monotonically increasing. "
            f"Ordering: {list(dict.fromkeys(assignment))}"
        )
    if len(assignment) != n:
        raise ValueError(f"The length of `assignment` ({len(assignment)}) does not equal the number of replicas ({n}).")
    size = n // len(groups)
    for stride in range(1, n // size + 1):
        if (n // size) % stride == 0:
            candidate = ReplicaGrouping(ir, stride, size)
            if candidate.assignment == assignment:
                return candidate
    return ReplicaGrouping._from_assignment(ir, assignment)
