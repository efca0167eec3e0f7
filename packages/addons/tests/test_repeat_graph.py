"""repeat_graph: a graph's ops moved into a loop body, run repeat_count times."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl_addons.core import host_store, repeat_graph
from popxl_addons.transforms.repeat_graph import repeat_graph as thin_repeat_graph


def test_thin_path_is_core() -> None:
    assert thin_repeat_graph is repeat_graph


def test_count_of_one_changes_nothing() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        host_store(popxl.constant(1.0) + 1)
    before = ir.main_graph.ops
    assert repeat_graph(ir.main_graph, 1) is ir.main_graph
    assert ir.main_graph.ops == before and len(ir.graphs) == 1


def test_main_graph_runs_n_times_with_one_transfer_each() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.zeros(3, np.float32), name="v")
        c = popxl.constant(np.arange(3, dtype=np.float32), name="c")
        ops.var_updates.accumulate_(v, c)
        out = host_store(v * 2)
    body = repeat_graph(ir.main_graph, 4)
    # The main graph keeps the variable and constant and runs one loop; the body holds the ops in order.
    (loop,) = ir.main_graph.ops
    assert loop.name == "repeat" and loop.attrs["count"] == 4 and loop.attrs["graph"] is body
    assert [op.name for op in body.ops] == ["var_update", "mul", "host_store"]
    # accumulate_'s scale constant, then the 2, follow: each read tensor once, in the order first read.
    assert [t.name for t in body.inputs][:2] == ["v", "c"] and len(body.inputs) == 4
    assert all(body.is_by_ref(t) for t in body.inputs) and body.outputs == ()
    assert list(loop.inputs[:2]) == [v, c]
    assert [t.graph for t in loop.inputs] == [ir.main_graph] * 4
    assert body.call_sites == (loop,)
    ir.num_host_transfers = 4
    with popxl.Session(ir, "cpu") as session:
        result = session.run()[out]
        final = session.get_tensor_data(v)
    # Iteration i stores 2 * (i + 1) * c: the update accumulates across iterations.
    expected = np.stack([2 * (i + 1) * np.arange(3, dtype=np.float32) for i in range(4)])
    np.testing.assert_array_equal(result, expected)
    np.testing.assert_array_equal(final, 4 * np.arange(3, dtype=np.float32))


def test_placement_and_called_graphs_move_with_the_ops() -> None:
    ir = popxl.Ir()
    sub = ir.create_graph(lambda x: x + 1, popxl.TensorSpec((2,), popxl.float32))
    with ir.main_graph, popxl.in_sequence(True):
        x = popxl.variable(np.ones(2, np.float32), name="x")
        with popxl.ipu(1):
            (y,) = ops.call(sub, x)
        out = host_store(y)
    old_call = ir.main_graph.ops[0]
    body = repeat_graph(ir.main_graph, 3)
    call, store = body.ops
    assert call.placement == old_call.placement and call.placement.ipu == 1
    assert store.placement.after == call.index
    # The subgraph is now run by the call in the loop body only.
    assert sub.call_sites == (call,)
    assert ir.main_graph.called_graphs == (body,) and body.called_graphs == (sub,)
    ir.num_host_transfers = 3
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[out], np.full((3, 2), 2, np.float32))


def test_subgraph_inputs_feed_the_loop() -> None:
    ir = popxl.Ir()

    def build(acc: popxl.TensorByRef, step: popxl.Tensor) -> None:
        ops.var_updates.accumulate_(acc, step)

    spec = popxl.TensorSpec((2,), popxl.float32)
    g = ir.create_graph(build, spec, spec)
    body = repeat_graph(g, 5)
    assert g.ops[0].name == "repeat" and list(g.ops[0].inputs[:2]) == list(g.inputs)
    with ir.main_graph:
        acc = popxl.variable(np.zeros(2, np.float32), name="acc")
        step = popxl.constant(np.array([1.0, 2.0], np.float32))
        ops.call(g, acc, step)
    with popxl.Session(ir, "cpu") as session:
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(acc), [5.0, 10.0])
    assert len(body.ops) == 1


def test_graph_outputting_what_it_makes_is_refused() -> None:
    ir = popxl.Ir()
    g = ir.create_graph(lambda x: x * 2, popxl.TensorSpec((2,), popxl.float32))
    with pytest.raises(ValueError, match="the loop has no outputs"):
        repeat_graph(g, 2)
    assert [op.name for op in g.ops] == ["mul"]
