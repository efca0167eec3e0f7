"""Replica groupings under dotted names (a module's variables' groupings)."""

from __future__ import annotations

from collections.abc import Iterable

import popxl
from popxl_addons.core.dot_tree import DotTree


class NamedReplicaGrouping(DotTree[popxl.ReplicaGrouping]):
    """A DotTree of replica groupings."""

    @classmethod
    def build_groups(cls, names: Iterable[str], value: popxl.ReplicaGrouping) -> NamedReplicaGrouping:
        """The same grouping under every name."""
        keys = list(names)
        return cls.pack(keys, [value] * len(keys))
