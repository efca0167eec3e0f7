"""popxl's parameter names, which programs pass by keyword (found by comparing signatures with popxl's sources)."""

from __future__ import annotations

import numpy as np

import popxl
from popxl import ops


def test_popxl_keywords() -> None:
    x = np.array([1.0, 2.0, 3.0], np.float32)
    y = np.array([2.0, 2.0, 2.0], np.float32)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(mode=True), popxl.ipu(ipu=0):
        a, b = popxl.constant(x), popxl.constant(y)
        power = popxl.d2h_stream((3,), popxl.float32)
        ops.host_store(power, ops.pow(t=a, e=b))
        above = popxl.d2h_stream((3,), popxl.bool)
        ops.host_store(above, ops.greater(input=a, other=b))
        seeds = ops.split_random_seed(popxl.variable(np.array([1, 2], np.uint32), popxl.uint32), n=3)
    assert len(seeds) == 3
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    np.testing.assert_allclose(out[power], x**y, rtol=1e-6)
    np.testing.assert_array_equal(out[above], x > y)
