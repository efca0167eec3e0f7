"""A Session's state held once: resident memory after attaching and running grows by about the state, not twice it.

Prints the growth in bytes over the built program (whose variable's host data is already resident) and the
variable's size.
"""

from __future__ import annotations

import gc
import sys

import numpy as np

import popxl
from popxl import ops

ELEMENTS = 64 * 2**20  # 256 MiB of float32


def resident() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))


def main() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones(ELEMENTS, np.float32), name="w")
        ops.var_updates.accumulate_(w, popxl.constant(np.float32(1)))
    gc.collect()
    before = resident()
    with popxl.Session(ir, "cpu") as session:
        session.run()
        session.run()
        gc.collect()
        grown = resident() - before
        assert float(w.host_data[0]) == 3.0  # read from the Session while it holds the value
    print(grown, ELEMENTS * 4, flush=True)
    assert float(w.host_data[-1]) == 3.0  # given back at detach


if __name__ == "__main__":
    main()
    sys.exit(0)
