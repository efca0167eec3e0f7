"""batch_serialise: every io_mode, step count, row and row-offset kind against NumPy."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import numpy as np
import pytest

import popxl
from popxl import ops
from popxl_addons.core import (
    IO_MODES,
    GraphWithNamedArgs,
    Module,
    NamedVariableFactories,
    RemoteHandle,
    batch_serial_buffer,
    batch_serialise,
)

pytestmark = pytest.mark.placement

SHAPE = (2, 3)


class TanhScale(Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("w", partial(np.linspace, 0.5, 1.5, x.nelms), x.dtype)
        return ops.tanh(x) * ops.reshape(w, x.shape) + x


def reference(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.tanh(x) * np.linspace(0.5, 1.5, x[0].size, dtype=np.float32).reshape(x.shape[1:]) + x


def new_ir(replication: int = 1) -> popxl.Ir:
    ir = popxl.Ir(replication=replication)
    ir._pb_ir.getSessionOptions().numIOTiles = 32
    return ir


def graph_of(ir: popxl.Ir) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
    return TanhScale().create_graph(popxl.TensorSpec(SHAPE, popxl.float32))


OFFSETS: dict[str, tuple[Callable[[int], Any], Callable[[int, int], int], Callable[[int, int], int]]] = {
    # kind: (row_offset for `rows`, slot row for call row n, minimum rows of the buffer)
    "zero": (lambda rows: 0, lambda n, rows: n, lambda n, rows: rows),
    "int": (lambda rows: 1, lambda n, rows: n + 1, lambda n, rows: rows + 1),
    "none": (lambda rows: None, lambda n, rows: 0, lambda n, rows: 1),
    "callable": (lambda rows: lambda r: (rows - 1) - r, lambda n, rows: rows - 1 - n, lambda n, rows: rows),
}


@pytest.mark.parametrize("io_mode", IO_MODES)
@pytest.mark.parametrize("steps", [1, 2, 3, 8])
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("offset", list(OFFSETS))
def test_forward_equivalence(io_mode: str, steps: int, rows: int, offset: str) -> None:
    offset_for, slot_row, min_rows = OFFSETS[offset]
    row_offset = offset_for(rows)
    from_buffer = steps % 2 == 1
    n = rows - 1
    data = np.random.default_rng(steps * 10 + rows).normal(size=(steps, *SHAPE)).astype(np.float32)
    ir = new_ir()
    with ir.main_graph, popxl.in_sequence(True):
        factories, graph = graph_of(ir)
        x_in = graph.graph.inputs[0]
        out_buffer = batch_serial_buffer(graph.graph.outputs[0], steps=steps)
        if from_buffer:
            in_buffer = batch_serial_buffer(x_in, steps=steps, rows=rows)
            for j in range(steps):
                ops.remote_store(in_buffer, n * steps + j, popxl.constant(data[j]))
            load: Any = (in_buffer, 0)
        else:
            load = popxl.h2d_stream(SHAPE, popxl.float32, "x")
        result = batch_serialise(
            graph,
            steps,
            load_handles={x_in: load},
            store_streams={},
            store_buffers={graph.graph.outputs[0]: RemoteHandle(out_buffer, row_offset)},
            rows=rows,
            io_mode=io_mode,
        )
        result.graph.bind(factories.init()).call(n)
        assert out_buffer.entries == steps * min_rows(n, rows)
        d = popxl.d2h_stream(SHAPE, popxl.float32, "y")
        for slot in range(out_buffer.entries):
            ops.host_store(d, ops.remote_load(out_buffer, slot))
    ir.num_host_transfers = max(out_buffer.entries, steps)
    with popxl.Session(ir, "cpu") as s:
        padding = np.zeros((ir.num_host_transfers - steps, *SHAPE), np.float32)
        feeds = (
            {} if from_buffer else {load: np.concatenate([data, padding]).reshape(-1, *SHAPE)[: ir.num_host_transfers]}
        )
        out = s.run({k: v if ir.num_host_transfers > 1 else v[0] for k, v in feeds.items()})[d]
    expected = np.zeros((ir.num_host_transfers, *SHAPE), np.float32)
    start = slot_row(n, rows) * steps
    expected[start : start + steps] = reference(data)
    np.testing.assert_allclose(out.reshape(expected.shape), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("io_mode", IO_MODES)
def test_inputs_loaded_from_streams_can_be_stored_and_outputs_streamed(io_mode: str) -> None:
    steps = 3
    data = np.random.default_rng(0).normal(size=(steps, *SHAPE)).astype(np.float32)
    ir = new_ir()
    with ir.main_graph, popxl.in_sequence(True):
        factories, graph = graph_of(ir)
        x_in, y_out = graph.graph.inputs[0], graph.graph.outputs[0]
        h = popxl.h2d_stream(SHAPE, popxl.float32, "x")
        d = popxl.d2h_stream(SHAPE, popxl.float32, "y")
        x_buffer = batch_serial_buffer(x_in, steps=steps)
        store_buffers: dict[popxl.Tensor, Any] = {x_in: (x_buffer, 0)}
        result = batch_serialise(graph, steps, {x_in: h}, {y_out: d}, store_buffers, io_mode=io_mode)
        assert isinstance(store_buffers[x_in], RemoteHandle) and result.stored_buffers[x_in].buffer is x_buffer
        result.graph.bind(factories.init()).call(0)
        d2 = popxl.d2h_stream(SHAPE, popxl.float32, "x_again")
        for j in range(steps):
            ops.host_store(d2, ops.remote_load(x_buffer, j))
    ir.num_host_transfers = steps
    with popxl.Session(ir, "cpu") as s:
        out = s.run({h: data})
    np.testing.assert_allclose(out[d], reference(data), rtol=1e-6)
    np.testing.assert_array_equal(out[d2], data)


@pytest.mark.parametrize("io_mode", IO_MODES)
@pytest.mark.parametrize("rows", [1, 3])
def test_sequence_of_graphs_sharing_one_buffer(io_mode: str, rows: int) -> None:
    steps = 4
    data = np.random.default_rng(rows).normal(size=(steps, *SHAPE)).astype(np.float32)
    ir = new_ir()
    with ir.main_graph, popxl.in_sequence(True):
        factories, graph = graph_of(ir)
        x_in, y_out = graph.graph.inputs[0], graph.graph.outputs[0]
        h = popxl.h2d_stream(SHAPE, popxl.float32, "x")
        d = popxl.d2h_stream(SHAPE, popxl.float32, "y")
        buffer = batch_serial_buffer(y_out, steps=steps)
        first = batch_serialise(graph, steps, {x_in: h}, {}, {y_out: (buffer, 0)}, io_mode=io_mode)
        middle = batch_serialise(
            graph, steps, {x_in: (buffer, 0)}, {}, {y_out: (buffer, 1)}, rows=rows, io_mode=io_mode
        )
        last = batch_serialise(graph, steps, {x_in: (buffer, rows)}, {y_out: d}, {}, io_mode=io_mode)
        assert buffer.entries == steps * (rows + 1)
        variables = factories.init()
        first.graph.bind(variables).call(0)
        for n in range(rows):
            middle.graph.bind(variables).call(n)
        last.graph.bind(variables).call(0)
    ir.num_host_transfers = steps
    with popxl.Session(ir, "cpu") as s:
        out = s.run({h: data})[d]
    expected = data
    for _ in range(rows + 2):
        expected = reference(expected)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


class Noisy(Module):
    def build(self, x: popxl.Tensor, seed: popxl.Tensor) -> popxl.Tensor:
        return x + ops.random_uniform(seed, x.shape)


def test_seed_is_split_per_step_identically_in_every_mode() -> None:
    steps = 5
    outputs = []
    for io_mode in IO_MODES:
        ir = new_ir()
        with ir.main_graph, popxl.in_sequence(True):
            spec = popxl.TensorSpec(SHAPE, popxl.float32)
            _, graph = Noisy().create_graph(spec, popxl.TensorSpec((2,), popxl.uint32))
            x_in, seed_in = graph.graph.inputs
            h = popxl.h2d_stream(SHAPE, popxl.float32, "x")
            d = popxl.d2h_stream(SHAPE, popxl.float32, "y")
            result = batch_serialise(
                graph, steps, {x_in: h}, {graph.graph.outputs[0]: d}, {}, seed_input=seed_in, io_mode=io_mode
            )
            assert [t.name for t in result.graph.graph.inputs] == [
                "batch_serial_loop_index",
                "batch_serial_random_seed",
            ]
            result.graph.call(0, popxl.constant(np.array([7, 11], np.uint32)))
        ir.num_host_transfers = steps
        with popxl.Session(ir, "cpu") as s:
            outputs.append(s.run({h: np.zeros((steps, *SHAPE), np.float32)})[d])
    key = jax.random.wrap_key_data(np.array([7, 11], np.uint32), impl="threefry2x32")
    expected = []
    for _ in range(steps):
        step_key, key = jax.random.split(key)
        expected.append(np.asarray(jax.random.uniform(step_key, SHAPE)))
    # Exact on any machine: jax.random.uniform makes its floats from the threefry bits by bit operations, then
    # subtracts 1 from a value in [1, 2) (exact), scales by 1 and adds 0.
    for out in outputs:
        np.testing.assert_array_equal(out, np.stack(expected))


def test_by_ref_inputs_accumulate_across_steps() -> None:
    class Accumulate(Module):
        def build(self, x: popxl.Tensor) -> None:
            total = self.add_variable_input("total", partial(np.zeros, x.shape), x.dtype, by_ref=True)
            ops.var_updates.accumulate_(total, x)

    steps = 6
    data = np.random.default_rng(2).normal(size=(steps, *SHAPE)).astype(np.float32)
    ir = new_ir()
    with ir.main_graph, popxl.in_sequence(True):
        factories, graph = Accumulate().create_graph(popxl.TensorSpec(SHAPE, popxl.float32))
        h = popxl.h2d_stream(SHAPE, popxl.float32, "x")
        result = batch_serialise(graph, steps, {graph.graph.inputs[0]: h}, {}, {}, io_mode="io_overlapped")
        assert result.graph.graph.is_by_ref(result.graph.graph.inputs[1])
        variables = factories.init()
        result.graph.bind(variables).call(0)
    ir.num_host_transfers = steps
    with popxl.Session(ir, "cpu") as s:
        s.run({h: data})
    np.testing.assert_allclose(s.get_tensor_data(variables.total), data.sum(0), rtol=1e-5)


def _ops_of(graph: popxl.Graph) -> list[str]:
    return [
        op.name
        for op in graph.ops
        if op.name in ("host_load", "remote_load", "call", "remote_store", "host_store", "repeat")
    ]


def _serialised_scale(steps: int, io_mode: str) -> tuple[popxl.Graph, popxl.Graph]:
    """The serialised graph of a stream-in, buffer-out TanhScale, and the compute graph."""
    ir = new_ir()
    with ir.main_graph:
        _, graph = graph_of(ir)
        buf = batch_serial_buffer(graph.graph.outputs[0], steps=steps)
        x = popxl.h2d_stream(SHAPE, popxl.float32)
        result = batch_serialise(
            graph, steps, {graph.graph.inputs[0]: x}, {}, {graph.graph.outputs[0]: (buf, 0)}, io_mode=io_mode
        )
    return result.graph.graph, graph.graph


def test_structure_sequential_is_one_loop_calling_the_graph_once() -> None:
    serial, compute = _serialised_scale(4, "io")
    loops = [op for op in serial.ops if op.name == "repeat"]
    assert len(loops) == 1 and loops[0].attrs["count"] == 4 and not serial.outputs
    body = loops[0].attrs["graph"]
    calls = [op for op in body.ops if op.name == "call"]
    assert len(calls) == 1 and calls[0].attrs["graph"] is compute
    assert _ops_of(body) == ["host_load", "call", "remote_store"]
    placements = {op.name: op.placement.tile_set for op in body.ops}
    assert placements["host_load"] == "io" and placements["remote_store"] == "io" and placements["call"] == "compute"


def test_structure_overlapped_prologue_loop_epilogue() -> None:
    serial, _ = _serialised_scale(5, "io_overlapped")
    assert _ops_of(serial) == ["host_load", "host_load", "call", "repeat", "remote_store", "call", "remote_store"]
    loop = next(op for op in serial.ops if op.name == "repeat")
    assert loop.attrs["count"] == 3
    assert _ops_of(loop.attrs["graph"]) == ["host_load", "remote_store", "call"]


def test_overlapped_with_two_steps_has_no_loop_and_one_step_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    ir = new_ir()
    with ir.main_graph:
        _, graph = graph_of(ir)
        h = popxl.h2d_stream(SHAPE, popxl.float32)
        two = batch_serialise(graph, 2, {graph.graph.inputs[0]: h}, {}, {}, io_mode="io_overlapped")
        assert "repeat" not in _ops_of(two.graph.graph)
        with caplog.at_level("WARNING"):
            one = batch_serialise(graph, 1, {graph.graph.inputs[0]: h}, {}, {}, io_mode="io_overlapped")
        assert "needs at least 2 steps" in caplog.text
        assert _ops_of(one.graph.graph) == ["repeat"]


def test_validation() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        _, graph = graph_of(ir)
        x_in = graph.graph.inputs[0]
        h = popxl.h2d_stream(SHAPE, popxl.float32)
        with pytest.raises(ValueError, match="Unknown 'io_mode'"):
            batch_serialise(graph, 2, {x_in: h}, {}, {}, io_mode="fast")
        with pytest.raises(ValueError, match="rows must be >0"):
            batch_serialise(graph, 2, {x_in: h}, {}, {}, rows=0, io_mode="compute")
        with pytest.raises(ValueError, match="steps must be"):
            batch_serialise(graph, 0, {x_in: h}, {}, {}, io_mode="compute")
        with pytest.raises(ValueError, match="IR must have IO tiles"):
            batch_serialise(graph, 2, {x_in: h}, {}, {}, io_mode="io")
        with pytest.raises(TypeError, match="Incompatible handle in `load_handles`"):
            batch_serialise(graph, 2, {x_in: 3}, {}, {}, io_mode="compute")
        buf = batch_serial_buffer(x_in, steps=2)
        with pytest.raises(TypeError, match="Incompatible handle in `store_buffers`"):
            batch_serialise(graph, 2, {x_in: h}, {}, {graph.graph.outputs[0]: (buf, lambda i: i)}, io_mode="compute")
        with pytest.raises(ValueError, match=r"gives float32 \(2, 3\), but the input is float32 \(6,\)"):
            batch_serialise(graph, 2, {x_in: h, graph.graph.inputs[1]: h}, {}, {}, io_mode="compute")
        w_stream = popxl.h2d_stream((6,), popxl.float32)
        with pytest.raises(KeyError):
            batch_serialise(graph, 2, {x_in: h, graph.graph.inputs[1]: w_stream}, {}, {}, io_mode="compute")
    ir4 = popxl.Ir(replication=4)
    with ir4.main_graph, pytest.raises(ValueError, match="Can't shard tensor with 6 elements over 4"):
        batch_serial_buffer(popxl.TensorSpec(SHAPE, popxl.float32), 2, 1, ir4.replica_grouping(1, 4))


def test_an_out_of_range_row_is_named_by_row_and_step() -> None:
    ir = new_ir()
    with ir.main_graph, popxl.in_sequence(True):
        factories, graph = graph_of(ir)
        x_in, y_out = graph.graph.inputs[0], graph.graph.outputs[0]
        out = batch_serial_buffer(y_out, steps=3, rows=2)
        x = popxl.h2d_stream(SHAPE, popxl.float32, "x")
        result = batch_serialise(graph, 3, {x_in: x}, {}, {y_out: (out, 0)}, rows=2, io_mode="compute")
        row = popxl.h2d_stream((), popxl.int32, "row")
        result.graph.bind(factories.init()).call(ops.host_load(row))
    ir.num_host_transfers = 3
    with popxl.Session(ir, "cpu") as session:
        feeds = {x: np.zeros((3, *SHAPE), np.float32)}
        session.run({**feeds, row: np.full(3, 1, np.int32)})
        with pytest.raises(popxl.OutOfRangeError, match=r"index 6 is out of range \[0, 6\) \(row 2, step 0 of rows"):
            session.run({**feeds, row: np.full(3, 2, np.int32)})
