"""Replica groupings under dotted names (a module's variables' groupings)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

import popxl
from popxl_addons.core.modules.dot_tree import DotTree

__all__ = [
    "NamedReplicaGrouping",
    "fill_none_group",
    "get_instance_replica_grouping",
    "is_cross_instance",
    "get_ild_size_from_popdist",
    "get_ild_replica_grouping",
    "is_cross_ild",
]


class NamedReplicaGrouping(DotTree[popxl.ReplicaGrouping]):
    """A DotTree of replica groupings."""

    @classmethod
    def build_groups(cls, names: Iterable[str], value: popxl.ReplicaGrouping) -> NamedReplicaGrouping:
        """The same grouping under every name."""
        keys = list(names)
        return cls.pack(keys, [value] * len(keys))


def fill_none_group(rg: popxl.ReplicaGrouping | None, none_value: popxl.ReplicaGrouping) -> popxl.ReplicaGrouping:
    """`rg`, or `none_value` when `rg` is None."""
    return none_value if rg is None else rg


def _or_all_replicas(replica_grouping: popxl.ReplicaGrouping | None) -> popxl.ReplicaGrouping:
    return replica_grouping or popxl.gcg().ir.replica_grouping()


def is_cross_instance(replica_grouping: popxl.ReplicaGrouping) -> bool:
    """Whether a group of `replica_grouping` spans replicas of more than one instance (process): its members
    reach past the replicas one instance runs (`ir.instance_replication_factor`). Never with one instance."""
    ir = popxl.gcg().ir
    return replica_grouping.group_size * replica_grouping.stride > ir.instance_replication_factor


def get_instance_replica_grouping(replica_grouping: popxl.ReplicaGrouping | None = None) -> popxl.ReplicaGrouping:
    """`replica_grouping` (all replicas by default) restricted to the replicas of one instance: the same stride,
    with groups cut to what one instance holds. With one instance (one process) it is the grouping itself.

    As in popxl-addons, a grouping given by assignment (not a constant stride) must repeat the same pattern in
    every instance, and gives its constant-stride form.
    """
    ir = popxl.gcg().ir
    rg = _or_all_replicas(replica_grouping)
    local = ir.instance_replication_factor
    if not rg.is_const:
        assignment = rg.assignment
        if assignment[:local] * (ir.replication_factor // local) != assignment:
            raise ValueError("Assignment pattern is different across instances")
        return rg.const_rg
    if rg.stride > local:
        raise ValueError("replica grouping stride must be < ir.instance_replication_factor")
    if is_cross_instance(rg):
        return ir.replica_grouping(stride=rg.stride, group_size=local // rg.stride)
    return rg


def get_ild_size_from_popdist() -> int:
    """The IPU-Link-Domain size: `ipuLinkDomainSize` of the JSON in `POPLAR_TARGET_OPTIONS` when set, else
    the replication factor, at most 64 (popxl-addons' assumption). It only groups replicas here: no IPU links."""
    options = json.loads(os.environ.get("POPLAR_TARGET_OPTIONS", "{}"))
    size = options.get("ipuLinkDomainSize")
    if size is None:
        return min(popxl.gcg().ir.replication_factor, 64)
    return int(size)


def is_cross_ild(replica_grouping: popxl.ReplicaGrouping) -> bool:
    """Whether a group of `replica_grouping` reaches past one IPU-Link Domain (`get_ild_size_from_popdist`)."""
    return replica_grouping.group_size * replica_grouping.stride > get_ild_size_from_popdist()


def get_ild_replica_grouping(replica_grouping: popxl.ReplicaGrouping | None = None) -> popxl.ReplicaGrouping:
    """`replica_grouping` (all replicas by default) restricted to one IPU-Link Domain: the same stride, with
    groups cut to the domain's size."""
    ir = popxl.gcg().ir
    rg = _or_all_replicas(replica_grouping)
    size = get_ild_size_from_popdist()
    if rg.stride > size:
        raise ValueError("replica grouping stride must be < IPU Link Domain size")
    if is_cross_ild(rg):
        return ir.replica_grouping(stride=rg.stride, group_size=size // rg.stride)
    return rg
