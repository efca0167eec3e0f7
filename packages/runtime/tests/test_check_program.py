"""The check program cut from the step's one trace: it takes no host effects with it and guards every write."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import ops

pytestmark = pytest.mark.placement

W = np.asarray([1.0, 2.0], np.float32)


def _program() -> tuple[popxl.Ir, popxl.HostToDeviceStream, popxl.Variable]:
    """A loop that prints and updates a variable, then a remote load at an offset the run is given."""
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(W, name="w")
        buffer = popxl.remote_buffer((2,), popxl.float32, 4)
        index = popxl.h2d_stream((), popxl.int32, "index")

        def body(t: popxl.TensorByRef) -> None:
            ops.var_updates.accumulate_(t, ops.print_tensor(t, "looped"))

        ops.repeat(ir.create_graph(body, w), 2, w)
        ops.var_updates.accumulate_(w, ops.remote_load(buffer, ops.host_load(index)))
    return ir, index, w


def test_a_checked_run_prints_once_and_a_failed_one_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    ir, index, w = _program()
    with popxl.Session(ir, "cpu") as session:
        session.run({index: np.int32(3)})
        assert capfd.readouterr().err.count("looped") == 2
        with pytest.raises(popxl.OutOfRangeError):
            session.run({index: np.int32(4)})
        assert capfd.readouterr().err.count("looped") == 0
        # The loop doubles w twice; the buffer's entries are zero. The failed run changed nothing.
        np.testing.assert_array_equal(session.get_tensor_data(w), 4 * W)
