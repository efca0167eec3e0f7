"""Host streams, remote buffers and variables across runs."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import ops

pytestmark = pytest.mark.placement


def test_host_streams_several_transfers_in_a_loop() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((2, 3), popxl.float32, "x")
        d = popxl.d2h_stream((2, 3), popxl.float32, "y")
        unused = popxl.h2d_stream((1,), popxl.float32, "unused")
        body = ir.create_empty_graph("body")
        with body:
            ops.host_store(d, ops.host_load(h) * 3.0)
        ops.repeat(body, 4)
    ir.num_host_transfers = 4
    data = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
    with popxl.Session(ir, "cpu") as s:
        assert s.expected_inputs() == [h] and unused not in s.expected_inputs()
        first = s.run({h: data})[d]
        outputs = s.create_host_outputs()
        s.run_with_outputs({h: data + 1}, outputs)
        with pytest.raises(ValueError, match="must be float32 of shape"):
            s.run_with_outputs({h: data}, {d: np.zeros((2, 3), np.float32)})
    np.testing.assert_allclose(first, data * 3)
    np.testing.assert_allclose(outputs[d], (data + 1) * 3)


@pytest.mark.parametrize("tensor_index", [False, True])
def test_remote_buffers_persist_across_runs(tensor_index: bool) -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        h = popxl.h2d_stream((2,), popxl.float32, "x")
        d = popxl.d2h_stream((2,), popxl.float32, "y")
        buf = popxl.remote_buffer((2,), popxl.float32, entries=3)
        index = (lambda i: popxl.constant(np.int32(i))) if tensor_index else (lambda i: i)
        old = ops.remote_load(buf, index(2))
        ops.host_store(d, old)
        x = ops.host_load(h)
        ops.remote_store(buf, index(2), x + old)
        ops.remote_store(buf, index(0), x)
    with popxl.Session(ir, "cpu") as s:
        outs = [s.run({h: np.array([i, -i], np.float32)})[d] for i in range(1, 4)]
    np.testing.assert_allclose(outs, [[0, 0], [1, -1], [3, -3]])


def test_remote_load_into_tensor_and_entries_grown_after_use() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        buf = popxl.remote_buffer((2,), popxl.float32, entries=1)
        ops.remote_store(buf, popxl.constant(np.int32(4)), popxl.constant(np.array([7, 8], np.float32)))
        t = ops.init((2,), popxl.float32, "t")
        loaded = ops.remote_load_(buf, popxl.constant(np.int32(4)), t)
        d = popxl.d2h_stream((2,), popxl.float32, "y")
        ops.host_store(d, loaded)
    buf.entries = 5
    with popxl.Session(ir, "cpu") as s:
        np.testing.assert_allclose(s.run()[d], [7, 8])


def test_remote_buffer_validation() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(ValueError, match=r"Entries must be a non-zero, positive integer\. Got 0"):
            popxl.remote_buffer((2,), popxl.float32, 0)
        buf = popxl.remote_buffer((2,), popxl.float32, 2)
        with pytest.raises(AttributeError):
            buf.tensor_shape = (3,)  # type: ignore[misc]
        with pytest.raises(AttributeError):
            buf.tensor_dtype = popxl.int32  # type: ignore[misc]
        buf.set_remote_buffer_info(popxl.int32, (3,), 4)
        assert (buf.tensor_shape, buf.tensor_dtype, buf.entries) == ((3,), popxl.int32, 4)
        buf.set_remote_buffer_info(popxl.float32, (2,), 2)
        with pytest.raises(ValueError, match="does not match buffer"):
            ops.remote_store(buf, 0, popxl.constant(np.zeros(3, np.float32)))
        with pytest.raises(ValueError, match="scalar integer"):
            ops.remote_load(buf, popxl.constant(np.zeros(2, np.int32)))
        with pytest.raises(ValueError, match="stream 'y'"):
            ops.host_store(popxl.d2h_stream((3,), popxl.float32, "y"), popxl.constant(np.zeros(2, np.float32)))
        with pytest.raises(ValueError, match="Entries must be a non-zero, positive integer"):
            buf.entries = 0


def test_variables_persist_and_round_trip() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.zeros(3, np.float32), name="v")
        c = popxl.constant(np.ones(3, np.float32))
        ops.var_updates.accumulate_(v, c)
    s = popxl.Session(ir, "cpu")
    s.write_variable_data(v, np.full(3, 10, np.float32))
    with s:
        s.run()
        np.testing.assert_allclose(s.get_tensor_data(v), 11)
        s.run()
        s.write_variables_data({v: np.full(3, 5, np.float32)})
        s.run()
    np.testing.assert_allclose(s.get_tensor_data(v), 6)
    np.testing.assert_allclose(s.get_tensor_data(c), 1)
    with s:
        s.run()
    np.testing.assert_allclose(s.get_tensor_data(v), 7)


@pytest.mark.parametrize(("replication", "given"), [(1, np.float32(3.0)), (2, np.array([[3.0], [4.0]], np.float32))])
def test_one_element_stream_takes_any_shape_of_one_element(replication: int, given: np.ndarray) -> None:
    # popxl checks only that each transfer's data squeezes to a single value for such streams.
    ir = popxl.Ir(replication=replication)
    with ir.main_graph:
        h = popxl.h2d_stream((1, 1), popxl.float32, "x")
        d = popxl.d2h_stream((1, 1), popxl.float32, "y")
        ops.host_store(d, ops.host_load(h) * 2.0)
    with popxl.Session(ir, "cpu") as s:
        out = s.run({h: given})[d]
    np.testing.assert_array_equal(out.ravel(), np.asarray(given).ravel() * 2)
    with popxl.Session(ir, "cpu") as s, pytest.raises(ValueError, match="Input for stream 'x' has shape"):
        s.run({h: np.zeros((replication, 2), np.float32)})


def test_downcast_inputs_can_be_refused() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((2,), popxl.float32, "x")
        d = popxl.d2h_stream((2,), popxl.float32, "y")
        ops.host_store(d, ops.host_load(h))
    wide = np.array([1.5, 2.5], np.float64)
    with popxl.Session(ir, "cpu") as s:
        np.testing.assert_array_equal(s.run({h: wide})[d], wide.astype(np.float32))
        with pytest.raises(ValueError, match="has dtype float64, expected float32"):
            s.run({h: wide}, downcast_inputs=False)
