"""One instance of the two-host test: its replicas' share of one program whose replicas span every host.

Checks, against NumPy, an all-reduce over every replica and what `get_tensor_data` returns, in every
instance, for variables grouped within an instance and across instances, in popxl's two retrieval
modes: "one_per_group" (the first replica of each group, `(groups, *shape)`) and "all_replicas"
(every replica in replica order, `(replicas, *shape)`).
"""

from __future__ import annotations

import numpy as np
import popdist

import popxl
from popxl import ops


def main() -> None:
    """Build, run and check the program; print one line naming this instance's replicas."""
    ir = popxl.Ir(replication="popdist")
    total, local, offset = popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas(), popdist.getReplicaIndexOffset()
    assert ir.replication_factor == total and ir.instance_replication_factor == local
    half = total // 2
    within = ir.replica_grouping(group_size=half)  # groups of consecutive replicas: per host here
    across = ir.replica_grouping(stride=half, group_size=2)  # each group has a replica on either half
    rng = np.random.default_rng(7)
    init = {name: rng.normal(size=(2, 3)).astype(np.float32) for name in ("wa", "wo", "aa", "ao")}
    with ir.main_graph, popxl.in_sequence(True):
        h = popxl.h2d_stream((3,), popxl.float32, "x")
        d = popxl.d2h_stream((3,), popxl.float32, "y")
        wa = popxl.variable(init["wa"], name="wa", replica_grouping=within, retrieval_mode="all_replicas")
        wo = popxl.variable(init["wo"], name="wo", replica_grouping=within, retrieval_mode="one_per_group")
        aa = popxl.variable(init["aa"], name="aa", replica_grouping=across, retrieval_mode="all_replicas")
        ao = popxl.variable(init["ao"], name="ao", replica_grouping=across, retrieval_mode="one_per_group")
        whole = popxl.variable(np.zeros(3, np.float32), name="whole", retrieval_mode="all_replicas")
        xt = ops.host_load(h)
        for v in (wa, wo, aa, ao, whole):
            ops.var_updates.accumulate_(v, xt)  # each replica adds its own x: replicas of a group now differ
        ops.host_store(d, ops.collectives.replicated_all_reduce(xt))
    x = rng.normal(size=(total, 3)).astype(np.float32)  # the same on every instance: each feeds its rows
    with popxl.Session(ir, "ipu_hw") as session:
        out = session.run({h: x[offset : offset + local]})[d]
        got = session.get_tensors_data([wa, wo, aa, ao, whole])
    np.testing.assert_allclose(out, np.broadcast_to(x.sum(0), (local, 3)), rtol=1e-6, atol=1e-6)
    group_within = np.arange(total) // half
    group_across = np.arange(total) % half
    np.testing.assert_allclose(got[wa], init["wa"][group_within] + x, rtol=1e-6)
    np.testing.assert_allclose(got[wo], init["wo"] + x[[0, half]], rtol=1e-6)
    np.testing.assert_allclose(got[aa], init["aa"][group_across] + x, rtol=1e-6)
    np.testing.assert_allclose(got[ao], init["ao"] + x[[0, 1]], rtol=1e-6)
    np.testing.assert_allclose(got[whole], x, rtol=1e-6)
    print(f"instance {popdist.getInstanceIndex()} ok: replicas {offset}..{offset + local - 1} of {total}", flush=True)


if __name__ == "__main__":
    main()
