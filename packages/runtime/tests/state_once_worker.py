"""A Session's state held once: resident memory after attaching and running grows by about the state, not twice it.

`run` (the default) prints the growth in bytes over the built program (whose variable's host data is already
resident) and the variable's size. `attach` prints how far the peak of resident memory rose while attaching a
program of remote variables in several buffers, and their size: their host values go as each buffer is placed.
`memmap FOLDER` prints how far memory not backed by a file grew while a variable memory-mapped in FOLDER was
attached and run, and after, and its size: the map is never copied whole into memory of the process's own.
"""

from __future__ import annotations

import gc
import resource
import sys

import jax
import numpy as np

import popxl
from popxl import ops

ELEMENTS = 64 * 2**20  # 256 MiB of float32


def resident() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))


def attach_peak() -> None:
    buffers, entries = 16, 4
    shape = (2 * ELEMENTS // (buffers * entries),)
    ir = popxl.Ir()
    filled: dict[popxl.Variable, int] = {}
    with ir.main_graph:
        for b in range(buffers):
            buffer = popxl.remote_buffer(shape, popxl.float32, entries)
            for e in range(entries):
                value = b * entries + e
                filled[popxl.remote_variable(np.full(shape, value, np.float32), buffer, e)] = value
        ops.remote_load(buffer, 0)
    session = popxl.Session(ir, "cpu")
    jax.block_until_ready(jax.device_put(np.ones(4)))  # JAX's runtime started before, not counted
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with session:
        risen = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    print(risen, 2 * ELEMENTS * 4, flush=True)
    assert all(float(v.host_data[-1]) == value for v, value in filled.items())  # given back at detach


def anonymous() -> int:
    """Resident bytes not backed by a file (a memory map's pages are file-backed)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssAnon"))


def memory_mapped(folder: str) -> None:
    data = np.lib.format.open_memmap(f"{folder}/w.npy", mode="w+", dtype=np.float32, shape=(ELEMENTS,))
    data[...] = 1.0
    data.flush()
    jax.block_until_ready(jax.device_put(np.ones(4)))  # JAX's runtime started before, not counted
    gc.collect()
    before = anonymous()
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(data, name="w")
        ops.var_updates.accumulate_(w, popxl.constant(np.float32(1)))
    with popxl.Session(ir, "cpu") as session:
        session.run()
        attached = anonymous() - before
    gc.collect()
    after = anonymous() - before
    assert float(data[-1]) == 2.0  # written back into the map
    print(attached, after, ELEMENTS * 4, flush=True)


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
    if sys.argv[1:2] == ["attach"]:
        attach_peak()
    elif sys.argv[1:2] == ["memmap"]:
        memory_mapped(sys.argv[2])
    else:
        main()
    sys.exit(0)
