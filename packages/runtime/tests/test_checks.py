"""No silent wrong numbers: out-of-range transfers raise, failed runs change nothing, runs are deterministic."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import OutOfRangeError, ops

pytestmark = pytest.mark.placement


def _program(fault: str) -> tuple[popxl.Ir, dict[str, object]]:
    """A program that bumps a variable and writes a buffer, then makes one out-of-range transfer."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        v = popxl.variable(np.zeros(2, np.float32), name="v")
        buf = popxl.remote_buffer((2,), popxl.float32, entries=3)
        h = popxl.h2d_stream((2,), popxl.float32, "x")
        d = popxl.d2h_stream((2,), popxl.float32, "y")
        index = popxl.h2d_stream((), popxl.int32, "index")
        ops.var_updates.accumulate_(v, popxl.constant(np.ones(2, np.float32)))
        ops.remote_store(buf, 0, v)
        i = ops.host_load(index)
        x = ops.host_load(h)
        if fault == "remote_load":
            ops.host_store(d, ops.remote_load(buf, i))
        elif fault == "remote_store":
            ops.remote_store(buf, i, x)
            ops.host_store(d, x)
        elif fault == "host_load":
            ops.host_store(d, x + ops.host_load(h))
        else:
            ops.host_store(d, x)
            ops.host_store(d, x)
    return ir, {"v": v, "buf": buf, "h": h, "d": d, "index": index}


@pytest.mark.parametrize(
    ("fault", "index", "message"),
    [
        ("remote_load", 3, r"remote_load from remote buffer 1: index 3 is out of range \[0, 3\)"),
        ("remote_store", -1, r"remote_store to remote buffer 1: index -1 is out of range \[0, 3\)"),
        ("host_load", 0, r"host_load from stream 'x': index 1 is out of range \[0, 1\)"),
        ("host_store", 0, r"host_store to stream 'y': index 1 is out of range \[0, 1\)"),
    ],
)
def test_out_of_range_transfers_raise_and_change_nothing(fault: str, index: int, message: str) -> None:
    ir, t = _program(fault)
    with popxl.Session(ir, "cpu") as s:
        good = {t["h"]: np.ones(2, np.float32), t["index"]: np.int32(1)}
        if fault in ("remote_load", "remote_store"):
            s.run(good)
            np.testing.assert_array_equal(s.get_tensor_data(t["v"]), 1)
        buffers_before = {k: np.asarray(b) for k, b in s._state["buffers"].items()}
        with pytest.raises(OutOfRangeError, match=message):
            s.run({t["h"]: np.ones(2, np.float32), t["index"]: np.int32(index)})
        expected = 1 if fault in ("remote_load", "remote_store") else 0
        np.testing.assert_array_equal(s.get_tensor_data(t["v"]), expected)
        for k, b in s._state["buffers"].items():
            np.testing.assert_array_equal(np.asarray(b), buffers_before[k])
        if fault in ("remote_load", "remote_store"):
            s.run(good)
            np.testing.assert_array_equal(s.get_tensor_data(t["v"]), 2)


def test_checks_can_be_turned_off() -> None:
    ir, t = _program("remote_load")
    with popxl.Session(ir, "cpu", checks=False) as s:
        out = s.run({t["h"]: np.ones(2, np.float32), t["index"]: np.int32(7)})
    # Unchecked, XLA clamps the index to the last entry, which was never written.
    np.testing.assert_array_equal(out[t["d"]], 0)


def test_out_of_range_inside_a_loop_names_the_index() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        buf = popxl.remote_buffer((1,), popxl.float32, entries=4)
        body = ir.create_empty_graph("body")
        with body:
            i = popxl.graph_input((), popxl.int32, "i")
            ops.remote_store(buf, i, popxl.constant(np.ones(1, np.float32)))
            popxl.graph_output(i + 1)
        ops.repeat(body, 6, 0)
    with popxl.Session(ir, "cpu") as s, pytest.raises(OutOfRangeError, match="index 4 is out of range"):
        s.run()


def _random_program(replicas: int) -> tuple[popxl.Ir, popxl.HostToDeviceStream, popxl.DeviceToHostStream]:
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        h = popxl.h2d_stream((4, 4), popxl.float32, "x")
        seed = popxl.variable(np.array([3, 4], np.uint32), popxl.uint32, name="seed")
        x = ops.host_load(h)
        a, b = ops.split_random_seed(seed)
        y = ops.dropout(ops.gelu(x @ x), a, 0.3) + ops.random_normal(b, (4, 4))
        y = ops.collectives.replicated_all_reduce(ops.softmax(y, 1), "mean")
        d = popxl.d2h_stream((4, 4), popxl.float32, "y")
        ops.host_store(d, y)
    return ir, h, d


def test_runs_are_deterministic_and_replica_modes_agree() -> None:
    x = np.random.default_rng(0).normal(size=(4, 4, 4)).astype(np.float32)
    results: dict[str, list[np.ndarray]] = {}
    for mode in ("devices", "simulate", "devices", "simulate"):
        ir, h, d = _random_program(4)
        with popxl.Session(ir, "cpu", replica_mode=mode) as s:
            results.setdefault(mode, []).extend([s.run({h: x})[d], s.run({h: x})[d]])
    # One program on one machine, compiled and run again: determinism is what is tested, so the bits must match
    # (processors may differ in the bits themselves, not in their repeating).
    for runs in results.values():
        for r in runs[1:]:
            np.testing.assert_array_equal(r, runs[0])
    # XLA may fuse and rewrite a batched program differently from a per-device one (for example a
    # division into a multiplication by a reciprocal), so the modes agree to rounding, not to the bit.
    np.testing.assert_allclose(results["devices"][0], results["simulate"][0], rtol=1e-6, atol=1e-7)
    assert not np.allclose(results["devices"][0][0], results["devices"][0][0, 0, 0])


def test_constant_offsets_are_checked_when_the_session_is_created() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        buf = popxl.remote_buffer((2,), popxl.float32, entries=2)
        ops.remote_store(buf, 3, popxl.constant(np.zeros(2, np.float32)))
    with pytest.raises(
        ValueError, match="remote_store to remote buffer 1 at constant offset 3, but the buffer has 2 entries"
    ):
        popxl.Session(ir, "cpu")
    buf.entries = 4
    popxl.Session(ir, "cpu")


def test_written_state_is_updated_in_place_checked_or_not() -> None:
    def program() -> tuple[popxl.Ir, popxl.Variable, popxl.DeviceToHostStream]:
        ir = popxl.Ir()
        with ir.main_graph, popxl.in_sequence(True):
            v = popxl.variable(np.zeros((64, 64), np.float32), name="v")
            frozen = popxl.variable(np.ones((64, 64), np.float32), name="frozen")
            buf = popxl.remote_buffer((64, 64), popxl.float32, entries=2)
            ops.remote_store(buf, 1, ops.remote_load(buf, 1) + frozen)
            ops.var_updates.accumulate_(v, ops.remote_load(buf, 1))
            d = popxl.d2h_stream((64, 64), popxl.float32, "v")
            ops.host_store(d, v)
        return ir, v, d

    results = {}
    for checks, donate in ((True, None), (False, None), (True, False), (False, False)):
        ir, v, d = program()
        with popxl.Session(ir, "cpu", checks=checks, donate_state=donate) as s:
            outs = [s.run()[d][0, 0] for _ in range(3)]
            results[checks, donate] = (outs, s.get_tensor_data(v)[0, 0], s.memory_analysis()["alias"])
    assert all(r[:2] == ([1.0, 3.0, 6.0], 6.0) for r in results.values())
    # The variable (16 KiB) and the buffer it writes (2 entries of 16 KiB) are donated; the frozen one is not.
    assert results[True, None][2] == results[False, None][2] == 64 * 64 * 4 + 2 * 64 * 64 * 4
    assert results[True, False][2] == results[False, False][2] == 0


@pytest.mark.parametrize("mode", ["simulate", "devices"])
def test_a_check_failing_after_writes_on_one_replica_changes_nothing_on_any(mode: str) -> None:
    # Every write comes before the failing index, inside and outside a loop, and the state is donated.
    ir = popxl.Ir(replication=2)
    with ir.main_graph, popxl.in_sequence(True):
        index = popxl.h2d_stream((), popxl.int32, "index")
        v = popxl.variable(np.zeros(4, np.float32), name="v")
        buf = popxl.remote_buffer((4,), popxl.float32, entries=3)

        def body(i: popxl.Tensor, w: popxl.TensorByRef) -> popxl.Tensor:
            ops.var_updates.accumulate_(w, popxl.constant(np.ones(4, np.float32)))
            ops.remote_store(buf, i, w)
            return i + 1

        graph = ir.create_graph(body, popxl.TensorSpec((), popxl.int32), v.spec)
        ops.repeat(graph, 3, popxl.constant(np.int32(0)), v)
        ops.remote_store(buf, ops.host_load(index), v)
    good, bad = np.asarray([2, 2], np.int32), np.asarray([0, 5], np.int32)
    # Simulated replicas write host memory at one offset only: the buffer stays on the device here.
    with popxl.Session(ir, "cpu", replica_mode=mode, remote_memory="device") as s:
        s.run({index: good})
        before = s.get_tensor_data(v).copy(), {k: np.asarray(b).copy() for k, b in s._state["buffers"].items()}
        with pytest.raises(OutOfRangeError, match=r"index 5 is out of range \[0, 3\) .*replica 1"):
            s.run({index: bad})
        np.testing.assert_array_equal(s.get_tensor_data(v), before[0])
        for k, b in s._state["buffers"].items():
            np.testing.assert_array_equal(np.asarray(b), before[1][k])
        s.run({index: good})
        np.testing.assert_array_equal(s.get_tensor_data(v), 6)


@pytest.mark.parametrize(
    ("shape", "entries", "message"),
    [
        ((-3,), 2, r"cannot have negative dimensions, got \(-3,\)"),
        ((2, 2.5), 2, r"Dimension 1 of a remote buffer's tensor shape \(2, 2.5\) must be a whole number"),
        ((2,), 0, "Entries must be a non-zero, positive integer. Got 0"),
        ((2,), 1.5, "entries must be a whole number, got 1.5"),
        ((10**9, 10**9), 2, r"2 entries of float32 \(1000000000, 1000000000\) would hold 8000000000000000000 bytes"),
        ((2,), 10**15, r"10{15} entries of float32 \(2,\) would hold 8000000000000000 bytes, more than"),
    ],
)
def test_absurd_remote_buffer_shapes_are_refused_when_made(
    shape: tuple[float, ...], entries: float, message: str
) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(ValueError, match=message):
            popxl.remote_buffer(shape, popxl.float32, entries)  # type: ignore[arg-type]
        buf = popxl.remote_buffer((2,), popxl.float32, 2)
        with pytest.raises(ValueError, match=message):
            buf.set_remote_buffer_info(popxl.float32, shape, entries)  # type: ignore[arg-type]
        # A refused change leaves the buffer as it was.
        assert (buf.tensor_shape, buf.entries) == ((2,), 2)
        with pytest.raises(ValueError, match="would hold"):
            buf.entries = 2**60
        assert buf.entries == 2
