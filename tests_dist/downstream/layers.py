"""A program using popxl-addons-layers: a Linear layer's graph, initialised and run."""

import numpy as np

import popxl
from popxl import ops
from popxl_addons.layers import Linear


def run() -> np.ndarray:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((2, 4), popxl.float32, name="x")
        y = popxl.d2h_stream((2, 3), popxl.float32, name="y")
        args, graph = Linear(3).create_graph(x.spec)
        (out,) = graph.bind(args.init()).call(ops.host_load(x))
        ops.host_store(y, out)
    with popxl.Session(ir, "cpu") as session:
        return np.asarray(session.run({x: np.ones((2, 4), np.float32)})[y])


if __name__ == "__main__":
    out = run()
    assert out.shape == (2, 3), out.shape
    print("layers ok")
