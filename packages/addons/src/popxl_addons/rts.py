# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.rts`, re-exporting the names of `popxl_addons.core.remote.rts`."""

from popxl_addons.core.remote.rts import (
    all_gather_replica_sharded_graph,
    gather_replica_sharded_tensor,
    reduce_replica_sharded_graph,
    reduce_replica_sharded_tensor,
    replica_sharded_spec,
)

__all__ = [
    "all_gather_replica_sharded_graph",
    "reduce_replica_sharded_graph",
    "reduce_replica_sharded_tensor",
    "gather_replica_sharded_tensor",
    "replica_sharded_spec",
]
