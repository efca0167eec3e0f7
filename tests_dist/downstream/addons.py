"""A program using popxl-addons: a Module batch-serialised over 4 micro-batches, a Linear layer, and a
tensor-parallel all-reduce over 2 simulated replicas."""

from functools import partial

import numpy as np

import popxl
import popxl_addons as addons
from popxl import ops
from popxl_addons.collectives import replicated_all_reduce
from popxl_addons.core import Module
from popxl_addons.layers import Linear
from popxl_addons.transforms.batch_serialisation import batch_serial_buffer, batch_serialise


class AddBias(Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        bias = self.add_variable_input("bias", partial(np.ones, x.shape, np.float32), x.dtype)
        return x + bias


def serialised(steps: int) -> np.ndarray:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        x = popxl.h2d_stream((2,), popxl.float32, name="x")
        args, graph = AddBias().create_graph(x.spec)
        buffer = batch_serial_buffer(graph.graph.outputs[0], steps=steps)
        result = batch_serialise(
            graph, steps, {graph.graph.inputs[0]: x}, {}, {graph.graph.outputs[0]: (buffer, 0)}, io_mode="compute"
        )
        result.graph.bind(args.init()).call(0)
        y = popxl.d2h_stream((2,), popxl.float32, name="y")
        for i in range(steps):
            ops.host_store(y, ops.remote_load(buffer, i))
    ir.num_host_transfers = steps
    with popxl.Session(ir, "cpu") as session:
        return np.asarray(session.run({x: np.zeros((steps, 2), np.float32)})[y])


def linear() -> np.ndarray:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((2, 4), popxl.float32, name="x")
        y = popxl.d2h_stream((2, 3), popxl.float32, name="y")
        args, graph = Linear(3).create_graph(x.spec)
        (out,) = graph.bind(args.init()).call(ops.host_load(x))
        ops.host_store(y, out)
    with popxl.Session(ir, "cpu") as session:
        return np.asarray(session.run({x: np.ones((2, 4), np.float32)})[y])


def all_reduced() -> np.ndarray:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.h2d_stream((2,), popxl.float32, name="x")
        y = popxl.d2h_stream((2,), popxl.float32, name="y")
        ops.host_store(y, replicated_all_reduce(ops.host_load(x)))
    with popxl.Session(ir, "cpu") as session:
        return np.asarray(session.run({x: np.arange(4, dtype=np.float32).reshape(2, 2)})[y])


if __name__ == "__main__":
    assert issubclass(AddBias, addons.Module)
    out = serialised(4)
    assert out.shape == (4, 2) and np.all(out == 1.0), out
    out = linear()
    assert out.shape == (2, 3), out.shape
    out = all_reduced()
    assert np.allclose(out, [[2.0, 4.0], [2.0, 4.0]]), out
    print("addons ok")
