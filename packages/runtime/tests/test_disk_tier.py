"""Remote buffers on local disk: the same numbers as in memory, files that refuse what they do not hold, no
state changed by a refused attach, resident memory bounded by the staging, reads ahead of the loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.errors import RemoteFileError
from popxl.lowering import disk_tier, remote_file
from popxl.lowering.remote_file import RemoteFile

ENTRIES = 6
SHAPE = (8, 16)


def _program(steps_inside: int = 3) -> tuple[popxl.Ir, list[Any], Any, Any]:
    """Remote variables in a buffer of several entries, updated in a loop over the entries, with an activation
    buffer written and read back: every value a whole number, so that each operation is exact in float32."""
    ir = popxl.Ir()
    with ir.main_graph:
        weights = popxl.remote_buffer(SHAPE, popxl.float32, entries=ENTRIES)
        held = [
            popxl.remote_variable(
                np.full(SHAPE, k, np.float32) + np.arange(16, dtype=np.float32), weights, k, name=f"w{k}"
            )
            for k in range(ENTRIES)
        ]
        acts = popxl.remote_buffer(SHAPE, popxl.float32, entries=steps_inside)
        x = popxl.h2d_stream(SHAPE, popxl.float32, name="x")
        y = popxl.d2h_stream(SHAPE, popxl.float32, name="y")
        xv = ops.host_load(x)
        for i in range(steps_inside):
            ops.remote_store(acts, i, xv * float(i + 1))

        def layer(counter: popxl.Tensor) -> popxl.Tensor:
            w = ops.remote_load(weights, counter)
            a = ops.remote_load(acts, popxl.constant(1, popxl.int32))
            ops.remote_store(weights, counter, w * 2.0 - a)
            return counter + 1

        graph = ir.create_graph(layer, popxl.constant(0, popxl.int32))
        (final,) = ops.repeat(graph, ENTRIES, popxl.constant(0, popxl.int32))
        total = ops.remote_load(weights, final - 1) + ops.remote_load(acts, popxl.constant(2, popxl.int32))
        ops.host_store(y, total)
    return ir, held, x, y


def _train(remote_dir: str | None, runs: int = 3) -> tuple[list[np.ndarray[Any, Any]], dict[str, Any]]:
    ir, held, x, y = _program()
    session = popxl.Session(ir, "cpu", remote_dir=remote_dir)
    outputs = []
    with session:
        for r in range(runs):
            outputs.append(session.run({x: np.full(SHAPE, r + 1, np.float32)})[y])
    values = {v.name: np.array(session.get_tensor_data(v)) for v in held}
    values["files"] = len(list(Path(remote_dir).glob("*.bin"))) if remote_dir else 0
    return outputs, values


def _expected(runs: int = 3) -> tuple[list[np.ndarray[Any, Any]], dict[str, Any]]:
    """The program's arithmetic in NumPy."""
    w = [np.full(SHAPE, k, np.float32) + np.arange(16, dtype=np.float32) for k in range(ENTRIES)]
    outs = []
    for r in range(runs):
        x = np.full(SHAPE, r + 1, np.float32)
        acts = [x * float(i + 1) for i in range(3)]
        w = [wk * 2.0 - acts[1] for wk in w]
        outs.append(w[-1] + acts[2])
    return outs, {f"w{k}": w[k] for k in range(ENTRIES)}


def test_disk_tier_gives_the_numbers_in_memory_gives(tmp_path: Path) -> None:
    in_memory = _train(None)
    on_disk = _train(str(tmp_path))
    expected = _expected()
    # Whole numbers well inside float32's exact range: every step is exact, on any processor.
    for got in (in_memory, on_disk):
        for out, want in zip(got[0], expected[0]):
            np.testing.assert_array_equal(out, want)
        for name, want in expected[1].items():
            np.testing.assert_array_equal(got[1][name], want, err_msg=f"{name} {got is on_disk}")
    assert on_disk[1]["files"] == 2, "the remote buffers were not on disk"
    assert not list(tmp_path.glob("*.bin")), "the files outlived their Session"


def test_environment_variable_chooses_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(disk_tier.REMOTE_DIR_VARIABLE, str(tmp_path))
    ir, _, x, _y = _program()
    session = popxl.Session(ir, "cpu")
    assert session.remote_dir == str(tmp_path.resolve())
    with session:
        session.run({x: np.ones(SHAPE, np.float32)})
    assert len(list(tmp_path.glob("remote_buffer_*.bin"))) == 2


def test_a_detached_remote_variable_is_a_view_of_its_file(tmp_path: Path) -> None:
    ir, held, x, _y = _program()
    session = popxl.Session(ir, "cpu", remote_dir=str(tmp_path))
    with session:
        session.run({x: np.ones(SHAPE, np.float32)})
    base = held[2].host_data
    while base is not None and not isinstance(base, np.memmap):
        base = base.base
    assert base is not None and Path(base.filename).parent == tmp_path.resolve(), "read back whole into memory"
    # Attaching again keeps the value where it is, and a second run goes on from it.
    with session:
        session.run({x: np.ones(SHAPE, np.float32)})
    w2 = np.full(SHAPE, 2, np.float32) + np.arange(16, dtype=np.float32)
    np.testing.assert_array_equal(session.get_tensor_data(held[2]), (w2 * 2 - 2) * 2 - 2)


def test_write_variables_data_reaches_the_file(tmp_path: Path) -> None:
    """What a checkpoint load does: values written while attached are what the next run loads."""
    ir, held, x, y = _program()
    session = popxl.Session(ir, "cpu", remote_dir=str(tmp_path))
    with session:
        session.write_variables_data({held[-1]: np.full(SHAPE, 5, np.float32)})
        np.testing.assert_array_equal(session.get_tensor_data(held[-1]), np.full(SHAPE, 5, np.float32))
        out = session.run({x: np.ones(SHAPE, np.float32)})[y]
    np.testing.assert_array_equal(out, np.full(SHAPE, 5 * 2 - 2 + 3, np.float32))


# -- the file format ---------------------------------------------------------------------------------


def test_a_file_of_another_shape_dtype_or_version_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "b.bin"
    made = RemoteFile.create(path, np.float32, (4, 5), 3)
    staging = remote_file.aligned_buffer(made.stride)
    staging[: made.nbytes] = np.arange(20, dtype=np.float32).view(np.uint8)
    made.write_from(1, staging)
    made.commit()
    made.close()
    before = path.read_bytes()
    for kwargs, what in (
        ({"shape": (4, 6)}, "shape"),
        ({"dtype": np.float16}, "dtype"),
        ({"entries": 4}, "entries"),
    ):
        with pytest.raises(RemoteFileError, match=what) as e:
            RemoteFile.open(path, **kwargs)  # type: ignore[arg-type]
        assert str(path) in str(e.value)
    other = bytearray(before)
    other[: len(remote_file.MAGIC) + 20] = other[: len(remote_file.MAGIC) + 20].replace(
        b'"version": 1', b'"version": 9'
    )
    (tmp_path / "v.bin").write_bytes(bytes(other))
    with pytest.raises(RemoteFileError, match="version 9"):
        RemoteFile.open(tmp_path / "v.bin")
    assert path.read_bytes() == before, "a refused file was changed"
    again = RemoteFile.open(path, np.float32, (4, 5), 3)
    into = remote_file.aligned_buffer(again.stride)
    again.read_into(1, into)
    np.testing.assert_array_equal(again.entry(into), np.arange(20, dtype=np.float32).reshape(4, 5))


def test_a_file_left_mid_run_or_corrupted_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.bin"
    made = RemoteFile.create(path, np.float32, (1024,), 2)
    staging = remote_file.aligned_buffer(made.stride)
    staging[: made.nbytes] = np.ones(1024, np.float32).view(np.uint8)
    made.mark_dirty()
    made.write_from(0, staging)
    with pytest.raises(RemoteFileError, match="process stopped"):
        RemoteFile.open(path)
    made.commit()
    made.close()
    data = bytearray(path.read_bytes())
    data[made.data_offset + 100] ^= 0xFF
    path.write_bytes(bytes(data))
    reopened = RemoteFile.open(path)
    with pytest.raises(RemoteFileError, match="entry 0 does not match its checksum"):
        reopened.read_into(0, remote_file.aligned_buffer(reopened.stride))


def test_a_full_disk_is_refused_before_any_state_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ir, held, _x, _y = _program()
    before = {v.name: np.array(v.host_data) for v in held}
    monkeypatch.setattr(disk_tier, "free_bytes", lambda folder: 4096)
    session = popxl.Session(ir, "cpu", remote_dir=str(tmp_path))
    with pytest.raises(RemoteFileError) as e:
        session.__enter__()
    message = str(e.value)
    assert str(tmp_path.resolve()) in message and "4096 are free" in message
    assert not list(tmp_path.glob("*.bin")), "files were written before the refusal"
    assert not session.is_attached
    for v in held:
        np.testing.assert_array_equal(v.host_data, before[v.name])


def test_the_memory_figures_count_the_staging_not_the_state(tmp_path: Path) -> None:
    entries, shape = 64, (1024, 1024)  # 256 MiB of float32
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer(shape, popxl.float32, entries=entries)
        y = popxl.d2h_stream(shape, popxl.float32, name="y")
        ops.host_store(y, ops.remote_load(buffer, 3))
    staging = 8 * 2**20
    in_memory = popxl.Session(ir, "cpu")
    with in_memory:
        figures = in_memory.memory_analysis()
    assert figures["host_bytes"] >= entries * 4 * 2**20
    ir2 = popxl.Ir()
    with ir2.main_graph:
        buffer = popxl.remote_buffer(shape, popxl.float32, entries=entries)
        y = popxl.d2h_stream(shape, popxl.float32, name="y")
        ops.host_store(y, ops.remote_load(buffer, 3))
    on_disk = popxl.Session(ir2, "cpu", remote_dir=str(tmp_path), remote_staging=staging)
    with on_disk:
        figures = on_disk.memory_analysis()
    assert figures["disk_bytes"] >= entries * 4 * 2**20
    assert figures["disk_staging"] <= 3 * max(staging, 4 * 2**20)
    assert figures["host_bytes"] < entries * 4 * 2**20 / 4


# -- resident memory and overlap ---------------------------------------------------------------------

WORKER = """
import json, resource, sys, time
import numpy as np
import popxl
from popxl import ops
entries, folder, staging = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
shape = (1024, 2048)  # 8 MiB of float32 an entry
ir = popxl.Ir()
with ir.main_graph:
    buffer = popxl.remote_buffer(shape, popxl.float32, entries=entries)
    y = popxl.d2h_stream((), popxl.float32, name="y")
    def layer(i, acc):
        w = ops.remote_load(buffer, i)
        ops.remote_store(buffer, i, w + 1.0)
        return i + 1, acc + ops.sum(w)
    graph = ir.create_graph(layer, popxl.constant(0, popxl.int32), popxl.constant(0.0, popxl.float32))
    _, total = ops.repeat(graph, entries, popxl.constant(0, popxl.int32), popxl.constant(0.0, popxl.float32))
    ops.host_store(y, total)
session = popxl.Session(ir, "cpu", remote_dir=folder or None, remote_staging=staging)
with session:
    events = session.record_remote_io() if folder else []
    for _ in range(3):
        del events[:]
        out = session.run({})[y]
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"rss": rss, "out": float(out), "events": [list(e) for e in events]}))
"""


def _worker(tmp_path: Path, entries: int, on_disk: bool, staging: int = 32 * 2**20) -> dict[str, Any]:
    folder = tmp_path / f"disk{entries}"
    folder.mkdir(exist_ok=True)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "POPXL_REMOTE_MEMORY": "host"}
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(entries), str(folder) if on_disk else "", str(staging)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    # Three runs over every entry, each adding one: the sum of the third run's loads is of entries of twos.
    assert result["out"] == pytest.approx(2.0 * entries * 1024 * 2048)
    return result


@pytest.mark.slow
def test_resident_memory_is_bounded_by_the_staging_not_the_state(tmp_path: Path) -> None:
    """Two states, one four times the other (256 MiB and 1 GiB): on disk, the same peak resident memory within
    64 MiB (the staging is 32 MiB each way); in memory the larger one holds its 768 MiB more."""
    small, large = _worker(tmp_path, 32, True), _worker(tmp_path, 128, True)
    assert large["rss"] - small["rss"] < 64 * 2**20, (small["rss"], large["rss"])
    small_ram, large_ram = _worker(tmp_path, 32, False), _worker(tmp_path, 128, False)
    assert large_ram["rss"] - small_ram["rss"] > 512 * 2**20, (small_ram["rss"], large_ram["rss"])


@pytest.mark.slow
def test_reads_start_ahead_of_the_loads_and_writes_drain_behind(tmp_path: Path) -> None:
    """A run after the first follows its loads: each entry's read starts before the program asks for it."""
    events = [disk_tier.RemoteIOEvent(*e) for e in _worker(tmp_path, 16, True)["events"]]
    loads = sorted((e for e in events if e.kind == "load"), key=lambda e: e.start)
    reads = {e.entry: e for e in events if e.kind == "read"}
    assert len(loads) == 16
    ahead = [load for load in loads[1:] if load.entry in reads and reads[load.entry].start < load.start]
    assert len(ahead) >= 13, f"only {len(ahead)} of 15 reads started before their load"
    stores = {e.entry: e for e in events if e.kind == "store"}
    writes = {e.entry: e for e in events if e.kind == "write"}
    behind = [k for k in stores if k in writes and writes[k].end > stores[k].end]
    assert len(behind) >= 8, "the program waited for its writes"


def test_a_store_of_zeros_moves_nothing_and_loads_as_zeros(tmp_path: Path) -> None:
    """An accumulator reset (all zero bytes) writes nothing: the entry reads as zeros; -0.0 is not zero bytes."""
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((4,), popxl.float32, entries=2)
        popxl.remote_variable(np.ones(4, np.float32), buffer, 0, name="w")
        x = popxl.h2d_stream((4,), popxl.float32, name="x")
        y = popxl.d2h_stream((4,), popxl.float32, name="y")
        ops.remote_store(buffer, 0, ops.host_load(x))
        ops.host_store(y, ops.remote_load(buffer, 0))
    session = popxl.Session(ir, "cpu", remote_dir=str(tmp_path))
    with session:
        events = session.record_remote_io()
        zeros = session.run({x: np.zeros(4, np.float32)})[y]
        assert not [e for e in events if e.kind == "write"]
        negative = session.run({x: np.full(4, -0.0, np.float32)})[y]
        assert [e.kind for e in events if e.kind == "write"] == ["write"]
    np.testing.assert_array_equal(zeros, np.zeros(4, np.float32))
    assert np.signbit(negative).all()


def test_loads_and_stores_from_several_threads_at_once(tmp_path: Path) -> None:
    """XLA calls back for independent buffers on threads of its own: each thread loads what it stored last,
    while reads run ahead along the runs' recorded loads of both."""
    ir = popxl.Ir()
    with ir.main_graph:
        buffers = [popxl.remote_buffer((256,), popxl.float32, entries=8) for _ in range(2)]
    tier = disk_tier.DiskTier(tmp_path, staging=8 * 4096, buffers=buffers)
    tier.open({})
    failures: list[str] = []

    def walk(bid: int, run: int) -> None:
        for i in range(8):
            tier.store(bid, i, np.full(256, 1000 * run + 10 * i + bid, np.float32))
            j = (i + 5) % 8  # an entry stored earlier in this run, or in the last
            stored_run = run if j <= i else run - 1
            want = 1000 * stored_run + 10 * j + bid if stored_run >= 0 else 0
            got = tier.load(bid, j)
            if not (got == want).all():
                failures.append(f"buffer {bid} entry {j}, run {run}: {got[0]} for {want}")

    for run in range(30):
        tier.begin_run()
        threads = [threading.Thread(target=walk, args=(b.remote_buffer_id, run)) for b in buffers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        tier.end_run()
    tier.remove()
    assert not failures, failures[:3]


def test_what_the_disk_tier_cannot_honour_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        buffer = popxl.remote_buffer((4,), popxl.float32, entries=2)
        ops.remote_store(buffer, 0, popxl.constant(np.ones(4, np.float32)))
    with pytest.raises(NotImplementedError, match="one replica; this one has 2"):
        popxl.Session(ir, "cpu", remote_dir=str(tmp_path))
    ir, _, _, _ = _program()
    with pytest.raises(ValueError, match="remote_staging"):
        popxl.Session(ir, "cpu", remote_dir=str(tmp_path), remote_staging=0)
    monkeypatch.setenv(disk_tier.STAGING_VARIABLE, "lots")
    with pytest.raises(ValueError, match=r"POPXL_REMOTE_STAGING.*'lots'"):
        popxl.Session(ir, "cpu", remote_dir=str(tmp_path))
