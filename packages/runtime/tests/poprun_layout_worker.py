"""One instance of test_poprun_layout: two instances under poprun with one replica each.

As in popxl, an instance with one replica feeds and receives host arrays without a replica axis (the
axis counts `ir.instance_replication_factor`, not `ir.replication_factor`); with two host transfers
they keep the transfers axis.
"""

from __future__ import annotations

import numpy as np
import popdist
import pytest

import popxl
from popxl import ops

TRANSFERS = 2


def main() -> None:
    """Feed this instance's rows without a replica axis and check the all-reduced rows it gets back."""
    ir = popxl.Ir(replication="popdist")
    index, instances = popdist.getInstanceIndex(), popdist.getNumInstances()
    assert (ir.replication_factor, ir.instance_replication_factor) == (instances, 1)
    with ir.main_graph, popxl.in_sequence(True):
        x_in = popxl.h2d_stream((3,), popxl.float32, "x")
        y_out = popxl.d2h_stream((3,), popxl.float32, "y")

        def step() -> None:
            ops.host_store(y_out, ops.collectives.replicated_all_reduce(ops.host_load(x_in)))

        ops.repeat(ir.create_graph(step), TRANSFERS)
    ir.num_host_transfers = TRANSFERS
    every = np.arange(instances * TRANSFERS * 3, dtype=np.float32).reshape(instances, TRANSFERS, 3)
    mine = every[index]  # (transfers, 3): no replica axis
    with popxl.Session(ir, "ipu_hw") as session:
        assert session.local_replicas == 1
        assert session._full_input_shape((3,)) == (TRANSFERS, 3)
        with pytest.raises(ValueError, match="has shape"):
            session.run({x_in: mine[:, None]})  # a replica axis of one is refused, as in popxl
        out = session.run({x_in: mine})[y_out]
        buffers = session.create_host_outputs()
        assert buffers[y_out].shape == (TRANSFERS, 3)
        session.run_with_outputs({x_in: mine}, buffers)
    assert out.shape == (TRANSFERS, 3)
    np.testing.assert_array_equal(out, every.sum(0))
    np.testing.assert_array_equal(buffers[y_out], every.sum(0))
    print(f"instance {index} ok: host arrays {mine.shape} in, {out.shape} out", flush=True)


if __name__ == "__main__":
    main()
