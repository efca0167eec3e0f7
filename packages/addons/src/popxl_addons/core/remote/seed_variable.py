"""popxl-addons' `seed_variable`: a random seed kept as a (grouped) remote variable and loaded with the weights."""

from __future__ import annotations

import popxl
from popxl.extension import loaded_variable

__all__ = ["seed_variable"]


def seed_variable(
    seed: int, replica_grouping: popxl.ReplicaGrouping | None = None
) -> tuple[popxl.RemoteVariable, popxl.Tensor]:
    """A seed variable per group of `replica_grouping` (one per replica by default) drawn from `seed`,
    and its on-device value for the program's random ops.

    Read and write the first in a Session; pass the second to ops. As in
    popxl-addons, the value is loaded when weights go to the device and stored
    back when they go to the host.
    """
    ir = popxl.gir()
    grouping = replica_grouping if replica_grouping is not None else ir.replica_grouping(group_size=1)
    seeds = popxl.create_seeds(seed, replicas=grouping.num_groups)
    with popxl.gmg():
        buffer = popxl.remote_buffer((2,), popxl.uint32)
        var = popxl.remote_variable(seeds, buffer, replica_grouping=grouping, name="random_seed")
        return var, loaded_variable(var, "random_seed_h2d")
