"""While attached, the devices hold the variables' values alone: the state is held once, and still read as before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import popxl
from popxl import ops

WORKER = Path(__file__).with_name("state_once_worker.py")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="resident memory is read from /proc")
def test_resident_memory_grows_by_the_state_once() -> None:
    done = subprocess.run([sys.executable, str(WORKER)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    grown, state = (int(n) for n in done.stdout.split())
    # The host copy goes as the device's is made: held twice, resident memory would grow by the state itself.
    assert grown < state / 2, f"resident memory grew by {grown} B attaching and running a {state} B state"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="resident memory is read from /proc")
def test_attaching_never_holds_the_state_twice() -> None:
    done = subprocess.run(
        [sys.executable, str(WORKER), "attach"], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    risen, state = (int(n) for n in done.stdout.split())
    # Were the host values kept until every buffer was placed, the peak would rise by the state itself.
    assert risen < state / 2, f"the peak of resident memory rose by {risen} B attaching a {state} B state"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="resident memory is read from /proc")
def test_a_memory_mapped_variable_is_never_read_whole(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(WORKER), "memmap", str(tmp_path)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    attached, after, size = (int(n) for n in done.stdout.split())
    # Attached, the devices' copy (on a CPU, memory of the process's own) is the one copy; a copy of the map
    # read into memory beside it would double that. Detached, the value lives in the map alone.
    assert attached < 1.5 * size, f"memory not backed by a file grew by {attached} B attaching a {size} B map"
    assert after < size / 4, f"{after} B of memory not backed by a file remained after detaching a {size} B map"


@pytest.mark.placement
def test_a_failed_attach_gives_the_host_values_back(monkeypatch: pytest.MonkeyPatch) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        buffers = [popxl.remote_buffer((4,), popxl.float32, 2) for _ in range(3)]
        values = {
            popxl.remote_variable(np.full((4,), 2.0 * b + e, np.float32), buffer, e): 2.0 * b + e
            for b, buffer in enumerate(buffers)
            for e in range(2)
        }
        ops.remote_load(buffers[0], 0)
    session = popxl.Session(ir, "cpu")
    placement = session._program.placement
    put_all, calls = placement.put_all, []

    def failing_third(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("placing failed")
        return put_all(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(placement, "put_all", failing_third)
    with pytest.raises(RuntimeError, match="placing failed"):
        session.__enter__()
    assert not session.is_attached
    for v, value in values.items():  # the two buffers placed first were handed over, and came back
        np.testing.assert_array_equal(v.host_data, value)
    monkeypatch.setattr(placement, "put_all", put_all)
    with session:  # attaching again, from the values given back
        for v, value in values.items():
            np.testing.assert_array_equal(session.get_tensor_data(v), value)


def _counter(initial: float = 0.0) -> tuple[popxl.Ir, popxl.Variable]:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.full((4,), initial, np.float32), name="v")
        ops.var_updates.accumulate_(v, popxl.constant(np.float32(1)))
    return ir, v


def test_values_read_while_held_and_after() -> None:
    ir, v = _counter()
    session = popxl.Session(ir, "cpu")
    with session:
        session.run()
        np.testing.assert_array_equal(v.host_data, 1.0)  # read from the devices
        np.testing.assert_array_equal(session.get_tensor_data(v), 1.0)
        session.write_variable_data(v, np.full((4,), 5.0, np.float32))
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(v), 6.0)
    np.testing.assert_array_equal(session.get_tensor_data(v), 6.0)
    np.testing.assert_array_equal(v.host_data, 6.0)  # given back to the variable, as popxl's Ir holds it
    with session:  # attached again: from the values read back
        session.run()
    np.testing.assert_array_equal(session.get_tensor_data(v), 7.0)


def test_without_weights_to_host_on_exit_the_host_copy_stays() -> None:
    ir, v = _counter(2.0)
    session = popxl.Session(ir, "cpu", weights_to_host_on_exit=False)
    with session:
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(v), 3.0)
    np.testing.assert_array_equal(v.host_data, 2.0)


def test_leaving_after_an_error_reads_the_values_back() -> None:
    ir, v = _counter()
    session = popxl.Session(ir, "cpu")
    with pytest.raises(KeyError), session:
        session.run()
        raise KeyError("the user's error")
    np.testing.assert_array_equal(session.get_tensor_data(v), 1.0)


def test_memory_mapped_values_stay_in_their_map(tmp_path: Path) -> None:
    data = np.lib.format.open_memmap(tmp_path / "v.npy", mode="w+", dtype=np.float32, shape=(4,))
    data[...] = 0
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(data, name="v")
        ops.var_updates.accumulate_(v, popxl.constant(np.float32(1)))
    session = popxl.Session(ir, "cpu")
    with session:
        session.run()
        assert session.get_tensor_data(v) is data  # the map itself, written from the devices
        np.testing.assert_array_equal(data, 1.0)
        session.run()
    np.testing.assert_array_equal(np.load(tmp_path / "v.npy"), 2.0)


def test_a_variable_copies_its_data_unless_nothing_can_write_it() -> None:
    writable = np.arange(4, dtype=np.float32)
    frozen = np.arange(4, dtype=np.float32)
    frozen.flags.writeable = False
    base = np.arange(8, dtype=np.float32)
    view = base[:4]
    view.flags.writeable = False  # read-only, but `base` still writes it
    ir = popxl.Ir()
    with ir.main_graph:
        copied, held, of_view = (popxl.variable(x) for x in (writable, frozen, view))
        converted = popxl.variable(frozen, popxl.float16)
        listed = popxl.variable([0.0, 1.0, 2.0, 3.0])
        out = popxl.d2h_stream((4,), popxl.float32)
        ops.host_store(out, copied + held + of_view)
    assert held.host_data is frozen
    for v, data in ((copied, writable), (of_view, base), (converted, frozen)):
        assert not np.shares_memory(v.host_data, data), v
    writable += 10
    base += 10
    with popxl.Session(ir, "cpu") as session:
        got = session.run()[out]
        np.testing.assert_array_equal(got, 3 * np.arange(4))
        np.testing.assert_array_equal(session.get_tensor_data(converted), np.arange(4))
        np.testing.assert_array_equal(session.get_tensor_data(listed), np.arange(4))
