"""popxl-addons' `popxl_addons.named_replica_grouping`.

Re-exports what this project has (`popxl_addons.core.named_replica_grouping`).
"""

from __future__ import annotations

from popxl_addons import _compat
from popxl_addons.core.named_replica_grouping import NamedReplicaGrouping

__all__ = ["NamedReplicaGrouping"]

# popxl-addons names that this project does not implement yet.
__getattr__ = _compat.not_implemented(
    __name__,
    [
        "fill_none_group",
        "get_instance_replica_grouping",
        "is_cross_instance",
        "get_ild_size_from_popdist",
        "get_ild_replica_grouping",
        "is_cross_ild",
    ],
    owner="popxl_addons.core",
)
