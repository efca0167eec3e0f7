"""A program too large for this machine, run in its own process: it must end with OutOfMemoryError, not a kill.

`run [bytes]`: five activations, each 1.5 times the memory the machine has available now (or `bytes`); a
variable is updated by the run, so that a refused run can be seen to change nothing. `attach [bytes]`: a
remote buffer of 1.5 times that memory (or of `bytes`). Exits 3 after the expected error, printing it.

`library rows cols [measure]`: five `rows x cols` float32 matmul outputs added together and summed, which
XLA:CPU hands to a library fusion whole; refused, it exits 3 as above; with `measure`, it runs and prints
its memory figures and how far the run raised the process's peak resident memory, as JSON.
"""

from __future__ import annotations

import json
import re
import resource
import sys
from pathlib import Path

import numpy as np

import popxl
from popxl import ops
from popxl.lowering import fit

ROWS = 1024


def run_too_large(nbytes: int | None = None) -> None:
    available = fit.host_available()
    assert available is not None, "this machine's available memory is unknown"
    cols = int((1.5 * available if nbytes is None else nbytes) / ROWS / 4)
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
        if nbytes is None:
            assert figures["temp"] > available, f"the program needs {figures['temp']} B only, {available} B available"
        try:
            session.run(feeds)
        except popxl.OutOfMemoryError as e:
            assert session.get_tensor_data(counter) == 0, "the refused run changed the state"
            print(e, flush=True)
            sys.exit(3)


def attach_too_large(nbytes: int | None = None) -> None:
    available = fit.host_available()
    assert available is not None, "this machine's available memory is unknown"
    entries = 4
    nbytes = int(1.5 * available) if nbytes is None else nbytes
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((nbytes // entries // 4,), popxl.float32, entries)
        ops.remote_store(buffer, 0, ops.remote_load(buffer, 1))
    session = popxl.Session(ir, "cpu")
    try:
        session.__enter__()
    except popxl.OutOfMemoryError as e:
        assert not session.is_attached
        print(e, flush=True)
        sys.exit(3)


def _resident(reset: bool) -> int:
    """With `reset`, the process's resident bytes now, its peak reset to them (Linux's clear_refs); without,
    its peak since. Where the peak cannot be reset, the peak since the process began, both times."""
    status = Path("/proc/self/status")
    try:
        if reset:
            Path("/proc/self/clear_refs").write_text("5")
        found = re.search(rf"^{'VmRSS' if reset else 'VmHWM'}:\s+(\d+) kB", status.read_text(), re.MULTILINE)
    except OSError:
        found = None
    return int(found.group(1)) * 1024 if found else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def library_fusion(rows: int, cols: int, measure: bool) -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        x = popxl.h2d_stream((rows, 16), popxl.float32, name="x")
        xv = ops.host_load(x, "xv")
        counter = popxl.variable(np.zeros((), np.float32), name="counter")
        ops.var_updates.accumulate_(counter, popxl.constant(np.float32(1)))
        total = ops.matmul(xv, popxl.variable(np.full((16, cols), 1, np.float32), name="w0"))
        for i in range(1, 5):
            total = total + ops.matmul(xv, popxl.variable(np.full((16, cols), i + 1, np.float32), name=f"w{i}"))
        y = popxl.d2h_stream((), popxl.float32, name="y")
        ops.host_store(y, ops.sum(total))
    feeds = {x: np.ones((rows, 16), np.float32)}
    with popxl.Session(ir, "cpu") as session:
        figures = session.memory_analysis(feeds)
        before = _resident(reset=True)
        try:
            session.run(feeds)
        except popxl.OutOfMemoryError as e:
            assert session.get_tensor_data(counter) == 0, "the refused run changed the state"
            print(json.dumps(figures), flush=True)
            print(e, flush=True)
            sys.exit(3)
        grew = _resident(reset=False) - before
        if measure:
            print(json.dumps({"figures": figures, "grew": grew}), flush=True)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "run":
        run_too_large(*map(int, args))
    elif mode == "attach":
        attach_too_large(*map(int, args))
    else:
        library_fusion(int(args[0]), int(args[1]), args[2:] == ["measure"])
