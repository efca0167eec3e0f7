# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.named_replica_grouping`: with one instance (one process) the instance groupings are the
groupings themselves; the IPU-Link-Domain ones only group replicas."""

from popxl_addons.core.modules.named_replica_grouping import (
    NamedReplicaGrouping,
    fill_none_group,
    get_ild_replica_grouping,
    get_ild_size_from_popdist,
    get_instance_replica_grouping,
    is_cross_ild,
    is_cross_instance,
)

__all__ = [
    "NamedReplicaGrouping",
    "fill_none_group",
    "get_instance_replica_grouping",
    "is_cross_instance",
    "get_ild_size_from_popdist",
    "get_ild_replica_grouping",
    "is_cross_ild",
]
