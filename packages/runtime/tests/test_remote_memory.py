"""Remote buffers in host memory: where state lives, what touches it, and the memory figures."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
import pytest

import popxl
from popxl import OutOfRangeError, ops
from popxl.lowering.program import Program

pytestmark = pytest.mark.placement

ALLOWED_ON_HOST = {"dynamic_slice", "dynamic_update_slice", "device_put"}


def _serialised_program(replicas: int = 1, entries: int = 4) -> tuple[popxl.Ir, dict[str, Any]]:
    """A loop that stores x_i * w into entry i of a buffer and reads entry i - 1 back, plus a remote variable."""
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph, popxl.in_sequence(True):
        h = popxl.h2d_stream((3,), popxl.float32, "x")
        d = popxl.d2h_stream((3,), popxl.float32, "y")
        buf = popxl.remote_buffer((3,), popxl.float32, entries)
        wbuf = popxl.remote_buffer((3,), popxl.float32, 1)
        w = popxl.remote_variable(np.full(3, 2.0, np.float32), wbuf, 0, name="w")

        def body(i: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
            ops.remote_store(buf, i, ops.host_load(h) * w)
            ops.host_store(d, ops.remote_load(buf, i))
            return i + 1

        graph = ir.create_graph(body, popxl.TensorSpec((), popxl.int32), popxl.TensorSpec((3,), popxl.float32))
        ops.repeat(graph, entries, popxl.constant(np.int32(0)), ops.remote_load(wbuf, 0))
        ops.remote_store(wbuf, 0, ops.remote_load(wbuf, 0) + 1)
    ir.num_host_transfers = entries
    return ir, {"h": h, "d": d, "buf": buf, "w": w}


def _feed(ir: popxl.Ir, streams: dict[str, Any]) -> tuple[dict[Any, np.ndarray[Any, Any]], np.ndarray[Any, Any]]:
    data = np.arange(ir.num_host_transfers * ir.replication_factor * 3, dtype=np.float32)
    data = data.reshape(ir.num_host_transfers, ir.replication_factor, 3)
    return {streams["h"]: popxl.HostLayout.of(ir).from_transfers_major(data)}, data


def _equations(jaxpr: Any) -> Iterator[Any]:
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            for sub in param if isinstance(param, tuple | list) else [param]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _equations(inner)


def _on_host(var: Any) -> bool:
    return str(getattr(getattr(var, "aval", None), "memory_space", "")) == "MemorySpace.Host"


def _relabels(eqn: Any) -> bool:
    # Adding or dropping a size-1 axis (shard_map's local replica axis) moves no data: XLA makes it a bitcast.
    sizes = {int(np.prod(v.aval.shape)) for v in [*eqn.invars, *eqn.outvars] if hasattr(v, "aval")}
    return eqn.primitive.name in {"squeeze", "broadcast_in_dim", "reshape"} and len(sizes) == 1


def _host_primitives(jaxpr: Any) -> set[str]:
    """Primitives of first-order equations that read or write a host-resident value (relabelling aside)."""
    found = set()
    for eqn in _equations(jaxpr):
        subs = [q for p in eqn.params.values() for q in (p if isinstance(p, tuple | list) else [p])]
        nested = any(hasattr(getattr(q, "jaxpr", q), "eqns") for q in subs)
        if not nested and not _relabels(eqn) and any(_on_host(v) for v in [*eqn.invars, *eqn.outvars]):
            found.add(eqn.primitive.name)
    return found


def test_default_placement_is_host_where_the_device_has_pinned_host_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POPXL_REMOTE_MEMORY", raising=False)
    ir, _ = _serialised_program()
    session = popxl.Session(ir, "cpu")
    kinds = {m.kind for m in jax.devices("cpu")[0].addressable_memories()}
    assert session.remote_memory == ("host" if "pinned_host" in kinds else "device")


def test_the_environment_sets_the_default_placement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPXL_REMOTE_MEMORY", "device")
    ir, _ = _serialised_program()
    assert popxl.Session(ir, "cpu").remote_memory == "device"
    assert popxl.Session(ir, "cpu", remote_memory="host").remote_memory == "host"


def test_an_unknown_placement_is_refused_naming_the_allowed_ones() -> None:
    ir, _ = _serialised_program()
    with pytest.raises(ValueError, match=r"remote_memory must be None, 'host' or 'device', got 'hbm'"):
        popxl.Session(ir, "cpu", remote_memory="hbm")


@pytest.mark.parametrize("replicas,mode", [(1, "auto"), (2, "simulate"), (2, "devices")])
@pytest.mark.parametrize("memory", ["host", "device"])
def test_results_match_numpy_in_both_placements(replicas: int, mode: str, memory: str) -> None:
    ir, t = _serialised_program(replicas)
    feeds, data = _feed(ir, t)
    with popxl.Session(ir, "cpu", replica_mode=mode, remote_memory=memory) as session:
        out = session.run(feeds)[t["d"]]
        kinds = {b.sharding.memory_kind for b in session._state["buffers"].values()}
        w = session.get_tensor_data(t["w"])
    expected = data * 2.0
    np.testing.assert_array_equal(out, expected if replicas > 1 else expected[:, 0])
    np.testing.assert_array_equal(w, np.full(3, 3.0, np.float32))
    assert kinds == ({"pinned_host"} if memory == "host" else {jax.devices("cpu")[0].default_memory().kind})


@pytest.mark.parametrize("replicas,mode", [(1, "auto"), (2, "simulate"), (2, "devices")])
@pytest.mark.parametrize("checks", [True, False])
def test_only_slices_updates_and_copies_touch_host_memory(replicas: int, mode: str, checks: bool) -> None:
    ir, t = _serialised_program(replicas)
    program = Program(ir, "cpu", checks=checks, replica_mode=mode, remote_memory="host")
    state = program.init_state({v: v.host_data for v in program.variables})
    feeds, _ = _feed(ir, t)
    inputs = {s.tensor_id: popxl.HostLayout.of(ir).to_replica_major(feeds[s]) for s in program.h2d}
    traced = program.traced(state, inputs)
    touched = _host_primitives(traced.jaxpr.jaxpr)
    assert touched and touched <= ALLOWED_ON_HOST, touched - ALLOWED_ON_HOST
    # In the compiled program, host memory space S(5) appears only on arguments and results,
    # and on instructions that move data: XLA computes nothing in host memory.
    hlo = traced.lower().compile().as_text()
    entry = re.search(r"entry_computation_layout=\{\((.*?)\)->", hlo)
    assert entry is not None and "S(5)" in entry.group(1)
    moving = {"parameter", "tuple", "get-tuple-element", "copy", "copy-start", "copy-done", "bitcast", "while"}
    moving |= {"dynamic-slice", "dynamic-update-slice", "fusion", "call", "custom-call"}
    for line in hlo.splitlines():
        match = re.match(r"\s*(?:ROOT )?%\S+ = (\S+?)\S* (\S+?)\(", line)
        if match and "S(5)" in line:
            assert match.group(2) in moving, line


def test_out_of_range_keeps_host_buffers_as_they_were() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        buf = popxl.remote_buffer((2,), popxl.float32, 3)
        index = popxl.h2d_stream((), popxl.int32, "i")
        ops.remote_store(buf, ops.host_load(index), popxl.constant(np.ones(2, np.float32)))
    with popxl.Session(ir, "cpu", remote_memory="host") as session:
        session.run({index: np.int32(1)})
        before = {k: np.asarray(b) for k, b in session._state["buffers"].items()}
        with pytest.raises(OutOfRangeError, match="index 3 is out of range"):
            session.run({index: np.int32(3)})
        for k, b in session._state["buffers"].items():
            np.testing.assert_array_equal(np.asarray(b), before[k])
            assert b.sharding.memory_kind == "pinned_host"


def test_buffers_grown_after_use_are_sized_by_their_final_entries() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        buf = popxl.remote_buffer((2,), popxl.float32, 1)
        d = popxl.d2h_stream((2,), popxl.float32, "y")
        ops.remote_store(buf, 0, popxl.constant(np.full(2, 5.0, np.float32)))
        buf.entries = 6
        ops.remote_store(buf, 5, popxl.constant(np.full(2, 7.0, np.float32)))
        ops.host_store(d, ops.remote_load(buf, 5) + ops.remote_load(buf, 0))
    with popxl.Session(ir, "cpu", remote_memory="host") as session:
        np.testing.assert_array_equal(session.run()[d], np.full(2, 12.0, np.float32))
        assert [b.shape for b in session._state["buffers"].values()] == [(6, 2)]


@pytest.mark.parametrize("checks", [True, False])
def test_memory_figures_count_buffers_as_host_bytes(checks: bool) -> None:
    entries, width = 64, 256
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((width,), popxl.float32, "x")
        buf = popxl.remote_buffer((width,), popxl.float32, entries)
        ops.remote_store(buf, 1, ops.host_load(h) * 2)
    feeds = {h: np.zeros(width, np.float32)}
    figures = {}
    for memory in ("host", "device"):
        with popxl.Session(ir, "cpu", remote_memory=memory, checks=checks) as session:
            figures[memory] = session.memory_analysis(feeds)
    storage, stream_data = entries * width * 4, width * 4
    # Checked or not, a run updates the donated buffer in place: no second copy of it is held.
    # The run's host stream data stays in host memory with the buffers.
    held = storage + stream_data
    assert figures["host"]["host_bytes"] == held
    assert figures["device"]["host_bytes"] == 0
    assert figures["device"]["device_bytes"] - figures["host"]["device_bytes"] == held
    for f in figures.values():
        assert f["alias"] == storage


def test_each_host_load_moves_one_transfer_from_host_memory() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((2, 3), popxl.float32, "x")
        d = popxl.d2h_stream((2, 3), popxl.float32, "y")
        ops.host_store(d, ops.host_load(h) * 3)
        ops.host_store(d, ops.host_load(h) * 3)
    ir.num_host_transfers = 2
    data = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    with popxl.Session(ir, "cpu", remote_memory="host") as session:
        np.testing.assert_array_equal(session.run({h: data})[d], data * 3)
        assert _host_primitives(session.traced({h: data}).jaxpr.jaxpr) <= ALLOWED_ON_HOST


@pytest.mark.parametrize("session_memory", ["host", "device"])
@pytest.mark.parametrize("replicas,mode", [(1, "auto"), (2, "simulate")])
def test_a_buffer_placed_on_its_own_lives_there_whatever_the_session_says(
    session_memory: str, replicas: int, mode: str
) -> None:
    """One buffer in host memory and one on the device, in both Session placements: each where it says."""
    entries, width = 8, 128
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph, popxl.in_sequence(True):
        h = popxl.h2d_stream((width,), popxl.float32, "x")
        d = popxl.d2h_stream((width,), popxl.float32, "y")
        on_host = popxl.remote_buffer((width,), popxl.float32, entries, memory="host")
        on_device = popxl.remote_buffer((width,), popxl.float32, entries, memory="device")
        follows = popxl.remote_buffer((width,), popxl.float32, entries)
        x = ops.host_load(h)
        ops.remote_store(on_host, 3, x * 2)
        ops.remote_store(on_device, 5, ops.remote_load(on_host, 3) + 1)
        ops.remote_store(follows, 7, ops.remote_load(on_device, 5) * 3)
        ops.host_store(d, ops.remote_load(follows, 7))
    x = np.arange(replicas * width, dtype=np.float32).reshape(replicas, width)
    feeds = {h: x if replicas > 1 else x[0]}
    default_kind = jax.devices("cpu")[0].default_memory().kind
    with popxl.Session(ir, "cpu", replica_mode=mode, remote_memory=session_memory) as session:
        out = session.run(feeds)[d]
        kinds = {key: b.sharding.memory_kind for key, b in session._state["buffers"].items()}
        figures = session.memory_analysis(feeds)
    np.testing.assert_array_equal(out, (x * 2 + 1) * 3 if replicas > 1 else (x[0] * 2 + 1) * 3)
    key = {b: f"buffer{b.remote_buffer_id}" for b in (on_host, on_device, follows)}
    assert kinds[key[on_host]] == "pinned_host" and kinds[key[on_device]] == default_kind
    assert kinds[key[follows]] == ("pinned_host" if session_memory == "host" else default_kind)
    storage = replicas * entries * width * 4
    stream_data = replicas * width * 4 if session_memory == "host" else 0
    # What host_store writes waits in host memory too, but for simulated replicas (on the device).
    stream_data += width * 4 if session_memory == "host" and replicas == 1 else 0
    assert figures["host_bytes"] == storage * (2 if session_memory == "host" else 1) + stream_data


def test_a_buffer_placement_is_checked() -> None:
    with popxl.Ir().main_graph:
        with pytest.raises(ValueError, match=r"memory must be None, 'host' or 'device', got 'hbm'"):
            popxl.remote_buffer((2,), popxl.float32, 1, memory="hbm")
        buf = popxl.remote_buffer((2,), popxl.float32, 1)
        assert buf.memory is None
        buf.memory = "host"
        assert buf.memory == "host"


@pytest.mark.parametrize("session_memory", ["host", "device"])
def test_what_host_store_writes_waits_with_the_stream_data(session_memory: str) -> None:
    """In host placement, a loop's host_stores fill a stack in host memory: device bytes do not grow with the
    transfers, host bytes grow by each one's size. In device placement, the stack is on the device."""
    width = 1024

    def figures(transfers: int) -> tuple[dict[str, int], np.ndarray[Any, Any]]:
        ir = popxl.Ir()
        with ir.main_graph, popxl.in_sequence(True):
            d = popxl.d2h_stream((width,), popxl.float32, "y")
            x = popxl.variable(np.arange(width, dtype=np.float32), name="x")

            def body(i: popxl.Tensor, v: popxl.Tensor) -> popxl.Tensor:
                ops.host_store(d, v * ops.cast(i, popxl.float32))
                return i + 1

            graph = ir.create_graph(body, popxl.TensorSpec((), popxl.int32), x.spec)
            ops.repeat(graph, transfers, popxl.constant(np.int32(0)), x)
        ir.num_host_transfers = transfers
        with popxl.Session(ir, "cpu", remote_memory=session_memory) as session:
            return session.memory_analysis(), session.run()[d]

    few, many = 8, 64
    (small, _), (large, out) = figures(few), figures(many)
    np.testing.assert_array_equal(out, np.arange(many, dtype=np.float32)[:, None] * np.arange(width, dtype=np.float32))
    grown = (many - few) * width * 4
    if session_memory == "host":
        assert large["device_bytes"] == small["device_bytes"]
        assert large["host_bytes"] - small["host_bytes"] == grown
    else:
        assert large["device_bytes"] - small["device_bytes"] == grown


def test_a_loop_over_entries_never_copies_a_whole_buffer() -> None:
    # An Adam-like step per entry, looped: each moment updated and stored, and the weight updated from the new
    # moment. XLA:CPU fused each loaded entry into every reader, so the weight's update read the moment's old
    # entry beside the moment's store and XLA copied the whole moment buffer every iteration.
    entries, width = 6, 64
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        w_buf, g_buf, m_buf = (popxl.remote_buffer((width,), popxl.float32, entries) for _ in range(3))

        def body(row: popxl.Tensor) -> popxl.Tensor:
            w, g, m = ops.remote_load(w_buf, row), ops.remote_load(g_buf, row), ops.remote_load(m_buf, row)
            ops.var_updates.accumulate_moving_average_(m, g, 0.9)
            ops.var_updates.scaled_add_(w, m, b=-0.5)
            ops.remote_store(m_buf, row, m)
            ops.remote_store(w_buf, row, w)
            return row + 1

        row = popxl.constant(np.int32(0), popxl.int32)
        ops.repeat(ir.create_graph(body, row), entries, row)
    with popxl.Session(ir, "cpu") as session:
        session.run()
        (compiled,) = session._program._compiled.values()
        text = compiled.step.as_text()
    whole = re.findall(rf"f32\[{entries},{width}\]\{{[^}}]*\}} copy\(", text)
    assert not whole, f"{len(whole)} copies of a whole buffer in the compiled step"
