"""A program too large for this machine, run in its own process: it must end with OutOfMemoryError, not a kill.

`run`: five activations, each 1.5 times the memory the machine has available now; a
variable is updated by the run, so that a refused run can be seen to change nothing. `attach`: a remote
buffer of 1.5 times that memory. Exits 3 after the expected error, printing it.
"""

from __future__ import annotations

import sys

import numpy as np

import popxl
from popxl import ops
from popxl.lowering import fit

ROWS = 1024


def run_too_large() -> None:
    available = fit.host_available()
    assert available is not None, "this machine's available memory is unknown"
    cols = int(1.5 * available / ROWS / 4)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        x = popxl.h2d_stream((ROWS, 1), popxl.float32, name="x")
        xv = ops.host_load(x, "xv")
        counter = popxl.variable(np.zeros((), np.float32), name="counter")
        ops.var_updates.accumulate_(counter, popxl.constant(np.float32(1)))
        acts = [ops.matmul(xv, popxl.variable(np.full((1, cols), i + 1, np.float32), name=f"w{i}")) for i in range(5)]
        total = ops.sum(ops.concat(acts, axis=0))
        y = popxl.d2h_stream(total.shape, total.dtype, name="y")
        ops.host_store(y, total)
    feeds = {x: np.ones((ROWS, 1), np.float32)}
    with popxl.Session(ir, "cpu") as session:
        figures = session.memory_analysis(feeds)
        assert figures["temp"] > available, f"the program needs {figures['temp']} B only, {available} B available"
        try:
            session.run(feeds)
        except popxl.OutOfMemoryError as e:
            assert session.get_tensor_data(counter) == 0, "the refused run changed the state"
            print(e, flush=True)
            sys.exit(3)


def attach_too_large() -> None:
    available = fit.host_available()
    assert available is not None, "this machine's available memory is unknown"
    entries = 4
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((int(1.5 * available / entries / 4),), popxl.float32, entries)
        ops.remote_store(buffer, 0, ops.remote_load(buffer, 1))
    session = popxl.Session(ir, "cpu")
    try:
        session.__enter__()
    except popxl.OutOfMemoryError as e:
        assert not session.is_attached
        print(e, flush=True)
        sys.exit(3)


if __name__ == "__main__":
    {"run": run_too_large, "attach": attach_too_large}[sys.argv[1]]()
