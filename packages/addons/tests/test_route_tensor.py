"""route_tensor_into_graph: a main-graph tensor reached from graphs called through calls and loops."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl_addons.core import is_subgraph, route_tensor_into_graph


def test_read_through_a_loop_and_a_call_and_update_in_place() -> None:
    ir = popxl.Ir()
    outer = ir.create_empty_graph("outer")
    inner = ir.create_empty_graph("inner")
    with ir.main_graph:
        counter = popxl.variable(np.zeros(2, np.float32), name="counter")
        scale = popxl.variable(np.array([2.0, 3.0], np.float32), name="scale")
        ops.repeat(outer, 4)
    with outer:
        ops.call(inner)
    with inner:
        # Each of the 4 iterations adds `scale` to `counter`, both reached from the main graph.
        ops.var_updates.accumulate_(route_tensor_into_graph(counter, modified=True), route_tensor_into_graph(scale))
    assert is_subgraph(ir.main_graph, inner) and not is_subgraph(inner, outer)
    assert len(outer.inputs) == 2 and len(inner.inputs) == 2
    with popxl.Session(ir, "cpu") as s:
        s.run()
    np.testing.assert_array_equal(s.get_tensor_data(counter), [8.0, 12.0])


def test_reuses_an_input_fed_at_every_call_and_refuses_outside_tensors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(3, np.float32), name="a")
        sub = ir.create_graph(lambda x: x * 2.0, a)
        (y,) = ops.call(sub, a)
        ops.call(sub, a)
        assert route_tensor_into_graph(a, sub) is sub.inputs[0] and len(sub.inputs) == 1
        stream = popxl.d2h_stream((3,), popxl.float32, "y")
        ops.host_store(stream, y)
    with popxl.Session(ir, "cpu") as s:
        np.testing.assert_array_equal(s.run()[stream], np.full(3, 2.0))
    other = ir.create_empty_graph("other")
    with other:
        stray = popxl.graph_input((1,), popxl.float32, "stray")
    with sub, pytest.raises(ValueError, match="not in a known parent graph"):
        route_tensor_into_graph(stray)
