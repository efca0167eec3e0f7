"""A program using popxl-addons-collectives: a tensor-parallel all-reduce over 2 simulated replicas."""

import numpy as np

import popxl
from popxl import ops
from popxl_addons.collectives import replicated_all_reduce


def run() -> np.ndarray:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.h2d_stream((2,), popxl.float32, name="x")
        y = popxl.d2h_stream((2,), popxl.float32, name="y")
        ops.host_store(y, replicated_all_reduce(ops.host_load(x)))
    with popxl.Session(ir, "cpu") as session:
        return np.asarray(session.run({x: np.arange(4, dtype=np.float32).reshape(2, 2)})[y])


if __name__ == "__main__":
    out = run()
    assert np.allclose(out, [[2.0, 4.0], [2.0, 4.0]]), out
    print("collectives ok")
