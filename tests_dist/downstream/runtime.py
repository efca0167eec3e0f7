"""A program using only popxl-xla: gelu of a host stream, run on the CPU."""

import numpy as np
import numpy.typing as npt
import popdist

import popart
import popxl
from popxl import ops


def gelu_on_device(values: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream(values.shape, popxl.float32, name="x")
        y = popxl.d2h_stream(values.shape, popxl.float32, name="y")
        ops.host_store(y, ops.gelu(ops.host_load(x)))
    with popxl.Session(ir, "cpu") as session:
        result: npt.NDArray[np.float32] = np.asarray(session.run({x: values})[y], np.float32)
    return result


if __name__ == "__main__":
    out = gelu_on_device(np.ones(3, np.float32))
    assert np.allclose(out, 0.8413, atol=1e-3), out
    assert popdist.getNumInstances() == 1
    print("runtime ok", popart.versionString())
