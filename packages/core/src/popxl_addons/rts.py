"""popxl-addons' `popxl_addons.rts`, re-exporting what this project has (`popxl_addons.core.rts`)."""

from __future__ import annotations

from popxl_addons.core.rts import (
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
