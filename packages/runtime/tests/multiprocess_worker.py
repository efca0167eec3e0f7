"""One process of the multi-process test: 4 replicas over 2 processes of 2 CPU devices each."""

from __future__ import annotations

import sys

import numpy as np

import popxl
from popxl import distributed, ops


def main(port: int, process_id: int) -> None:
    distributed.initialize(
        f"127.0.0.1:{port}", 2, process_id, cpu_devices=2, coordinator_bind_address=f"127.0.0.1:{port}"
    )
    ir = popxl.Ir(replication=4)
    with ir.main_graph, popxl.in_sequence(True):
        h = popxl.h2d_stream((3,), popxl.float32, "x")
        d = popxl.d2h_stream((3,), popxl.float32, "y")
        pairs = ir.replica_grouping(stride=2, group_size=2)
        v = popxl.variable(np.array([[1, 1, 1], [2, 2, 2]], np.float32), name="v", replica_grouping=pairs)
        buf = popxl.remote_buffer((3,), popxl.float32, entries=2)
        xt = ops.host_load(h)
        ops.remote_store(buf, 1, xt * v)
        reduced = ops.collectives.replicated_all_reduce(ops.remote_load(buf, 1))
        ops.var_updates.accumulate_(v, reduced)
        ops.host_store(d, reduced + ops.collectives.replicated_all_reduce(xt, group=pairs))
    ir.num_host_transfers = 1
    assert ir.instance_replication_factor == 2
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    mine = x[2 * process_id : 2 * process_id + 2]
    with popxl.Session(ir, "cpu", replica_mode="devices") as session:
        assert session.local_replicas == 2
        out = session.run({h: mine})[d]
        final = session.get_tensor_data(v)
    scale = np.array([1, 2, 1, 2], np.float32)[:, None]
    total = (x * scale).sum(0)
    pair_sum = np.stack([x[r] + x[(r + 2) % 4] for r in range(4)])
    np.testing.assert_allclose(out, (total + pair_sum)[2 * process_id : 2 * process_id + 2])
    np.testing.assert_allclose(final, np.stack([1 + total, 2 + total]))
    print(f"process {process_id} ok", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
