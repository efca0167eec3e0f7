"""popxl names programs use: HostTensor, Graph.called_graphs, Session._full_input_shape, remote_code_load and
`ir._pb_ir.getAllGraphs()`."""

from __future__ import annotations

import typing

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.ops.code_loading import code_loads
from popxl.tensor import HostTensor


def test_host_tensor_is_an_alias_of_arrays_and_scalar_iterables() -> None:
    args = typing.get_args(HostTensor)
    assert len(args) == 2 and typing.get_origin(args[0]) is np.ndarray
    assert typing.get_args(args[1]) == (int | float | bool,)


def _spec() -> popxl.TensorSpec:
    return popxl.TensorSpec((2,), popxl.float32)


def test_called_graphs_are_the_direct_callees_once_each() -> None:
    ir = popxl.Ir()
    inner = ir.create_graph(lambda x: x + 1, _spec())

    def outer_fn(x: popxl.Tensor) -> popxl.Tensor:
        (y,) = ops.call(inner, x)
        return y

    outer = ir.create_graph(outer_fn, _spec())
    other = ir.create_graph(lambda x: x * 2, _spec())
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        ops.call(outer, x)
        ops.repeat(other, 2, x)
        ops.call(outer, x)
        ops.conditional(popxl.constant(True), inner, other, [x], [x])
    assert ir.main_graph.called_graphs == (outer, other, inner)
    assert outer.called_graphs == (inner,) and inner.called_graphs == ()


def test_full_input_shape_adds_transfers_then_replicas() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        s = popxl.h2d_stream((3, 4), popxl.float32)
        ops.host_store(popxl.d2h_stream((3, 4), popxl.float32), ops.host_load(s))
    session = popxl.Session(ir, "cpu")
    assert session._full_input_shape((3, 4)) == (3, 4)
    ir.num_host_transfers = 8
    assert session._full_input_shape((3, 4)) == (8, 3, 4)
    ir2 = popxl.Ir(replication=4)
    ir2.num_host_transfers = 8
    with ir2.main_graph:
        popxl.variable(0.0)
    assert popxl.Session(ir2, "cpu", replica_mode="simulate")._full_input_shape((3, 4)) == (8, 4, 3, 4)


def test_remote_code_load_is_checked_and_recorded() -> None:
    ir = popxl.Ir()
    g = ir.create_graph(lambda x: x + 1, _spec())
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        ops.remote_code_load(g, "executable")
        (y,) = ops.call(g, x)
        out = popxl.d2h_stream((2,), popxl.float32)
        ops.host_store(out, y)
        with pytest.raises(ValueError, match="cannot load the code for the graph it resides in"):
            ops.remote_code_load(ir.main_graph, "executable")
        with pytest.raises(ValueError, match="Not a valid location: nowhere"):
            ops.remote_code_load(g, "nowhere")  # type: ignore[arg-type]
        with pytest.raises(NotImplementedError, match="io_buffer"):
            ops.remote_code_load(g, "io_buffer")
    (load,) = code_loads(ir.main_graph)
    assert load.graph is g and load.destination == "executable" and load.position == 0
    assert code_loads(g) == () and [op.name for op in ir.main_graph.ops] == ["call", "host_store"]
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[out], [2.0, 2.0])


def test_get_all_graphs_counts_every_graph_with_the_main_graph_first() -> None:
    ir = popxl.Ir()
    assert ir._pb_ir.getAllGraphs() == [ir.main_graph]
    called = ir.create_graph(lambda x: x + 1, _spec())
    uncalled = ir.create_empty_graph("spare")
    with ir.main_graph:
        ops.call(called, popxl.variable(np.ones(2, np.float32)))
    graphs = ir._pb_ir.getAllGraphs()
    # popart lists every graph created, called or not, ordered by id (the main graph's id is "").
    assert len(graphs) == 3 and graphs[0] is ir.main_graph
    assert {id(g) for g in graphs} == {id(ir.main_graph), id(called), id(uncalled)}
    assert [g.id for g in graphs] == sorted(g.id for g in graphs)
