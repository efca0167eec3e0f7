"""TaskSession: named state, step counting, and checkpoints written to and read from folders, which survive a
crash midway through a save."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.lowering.remote_file import RemoteFile
from popxl_addons.core import (
    NamedTensors,
    NamedVariableFactories,
    TaskSession,
    VariableFactory,
    initialise_memmap_dir_from_checkpoint,
)
from popxl_addons.core.session import task_session
from popxl_addons.core.session.task_session import (
    CheckpointError,
    IncompleteCheckpointError,
    mark_checkpoint_complete,
)

W = np.arange(4, dtype=np.float32)


class Loader:
    """A dataloader that records where it was resumed from and which checkpoints were in view as it saved, and
    fails to save when told to."""

    def __init__(self) -> None:
        self.position = 0
        self.resumed: list[str] = []
        self.fail = False
        self.in_view: list[list[str]] = []

    def save(self, filename: str) -> None:
        self.in_view.append(_visible(pathlib.Path(filename).parent.parent))
        if self.fail:
            raise OSError(errno.ENOSPC, "No space left on device")
        pathlib.Path(filename).write_text(str(self.position))

    def resume(self, filename: str) -> None:
        self.resumed.append(filename)
        self.position = int(pathlib.Path(filename).read_text())


def _session(memmap_dir: pathlib.Path | None = None, max_checkpoints: int = 1) -> TaskSession:
    ir = popxl.Ir()
    with ir.main_graph:
        factories = NamedVariableFactories(
            w=VariableFactory(lambda: W.copy(), popxl.float32, "w"),
            step=VariableFactory(lambda: np.float32(0), popxl.float32, "step"),
        )
        state = factories.init("model", memmap_dir=memmap_dir)
        x_in = popxl.h2d_stream((4,), popxl.float32, "x")
        ops.var_updates.accumulate_(state.w, ops.host_load(x_in))
        ops.var_updates.accumulate_(state.step, popxl.constant(np.float32(1)))
        out = popxl.d2h_stream((4,), popxl.float32, "w_out")
        ops.host_store(out, state.w)
    return TaskSession([x_in], [out], state, max_checkpoints, ir, "cpu")


def test_checkpoint_round_trip(tmp_path: pathlib.Path) -> None:
    s = _session()
    s.dataloader = Loader()
    s.dataloader.position = 7
    s.add_session_state_info({"lr": 0.5})
    with s:
        s.run({s.inputs.x: np.ones(4, np.float32)})
        s.run({s.inputs.x: np.ones(4, np.float32)})
        s.save_checkpoint(str(tmp_path / "ckpt"))
        s.write_variables_data({s.state.w: np.zeros(4, np.float32), s.state.step: np.float32(0)})
        s.dataloader.position = 0
        s.session_state["steps"] = 99
        s.load_checkpoint(str(tmp_path / "ckpt"))
        np.testing.assert_array_equal(s.get_named_tensors_data().w, W + 2)
    assert s.get_named_tensors_data().step == 2
    assert s.session_state == {"steps": 2, "lr": 0.5} and s.dataloader.position == 7
    assert json.loads((tmp_path / "ckpt" / "session_info.json").read_text())["steps"] == 2


def test_old_checkpoints_are_deleted_and_missing_keys_reported(tmp_path: pathlib.Path) -> None:
    s = _session(max_checkpoints=1)
    with s:
        s.save_checkpoint(str(tmp_path / "a"))
        s.save_checkpoint(str(tmp_path / "b"))
    assert not (tmp_path / "a").exists() and (tmp_path / "b" / "model" / "w.npz").exists()
    (tmp_path / "b" / "model" / "w.npz").unlink()
    with s, pytest.raises(ValueError, match=r"state keys not in checkpoint: \['w'\]"):
        s.load_checkpoint(str(tmp_path / "b"), report_missing="error")
    with pytest.raises(ValueError, match="Weights & Biases"):
        s.save_checkpoint("wandb://run/ckpt")


def test_memory_mapped_state_is_copied_and_sessions_load_from_each_other(tmp_path: pathlib.Path) -> None:
    src = _session(memmap_dir=tmp_path / "maps")
    with src:
        src.run({src.inputs.x: np.full(4, 3.0, np.float32)})
        src.save_checkpoint(str(tmp_path / "ckpt"))
    assert sorted(p.name for p in (tmp_path / "ckpt" / "model").iterdir()) == ["model.step.npy", "model.w.npy"]
    copied = np.memmap(str(tmp_path / "ckpt" / "model" / "model.w.npy"), np.float32, "r", shape=(4,))
    np.testing.assert_array_equal(copied, W + 3)
    dst = _session()
    with dst:
        dst.load_from_session(src)
        np.testing.assert_array_equal(dst.get_named_tensors_data().w, W + 3)
    assert isinstance(dst.state, NamedTensors)


def _visible(folder: pathlib.Path) -> list[str]:
    return sorted(p for p in os.listdir(folder) if not p.startswith("."))


def _run_and_save(s: TaskSession, path: pathlib.Path) -> None:
    """One step (adding 1 to `w` and to `step`), then a save with the dataloader one position on."""
    s.run({s.inputs.x: np.ones(4, np.float32)})
    s.dataloader.position += 1
    s.save_checkpoint(str(path))


def _assert_loads_step_1(s: TaskSession, path: pathlib.Path) -> None:
    with s:
        s.load_checkpoint(str(path))
        np.testing.assert_array_equal(s.get_named_tensors_data().w, W + 1)
    assert s.get_named_tensors_data().step == 1
    assert s.session_state["steps"] == 1 and s.dataloader.position == 1


# Saves `a` after one step, then after a second step dies by SIGKILL midway through saving again: `writing`
# (to `b`) once a file is written, `replacing` (to `a` again) as the new copy is about to be renamed into place.
_CRASHING_SAVE = """
import os, pathlib, signal, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from test_task_session import Loader, _run_and_save, _session

root, how = pathlib.Path(sys.argv[2]), sys.argv[3]
s = _session(max_checkpoints=1)
s.dataloader = Loader()
with s:
    _run_and_save(s, root / "a")
    if how == "writing":
        savez = np.savez
        def savez_then_die(*args, **kwargs):
            savez(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)
        np.savez = savez_then_die
    else:
        replace = os.replace
        def replace_or_die(src, dst):
            if ".partial-" in os.fspath(src):
                os.kill(os.getpid(), signal.SIGKILL)
            replace(src, dst)
        os.replace = replace_or_die
    _run_and_save(s, root / ("b" if how == "writing" else "a"))
"""


@pytest.mark.slow
def test_a_save_killed_midway_leaves_the_previous_checkpoint(tmp_path: pathlib.Path) -> None:
    hows = ["writing", "replacing"]
    # Both at once: each child spends most of its time importing.
    children = {
        how: subprocess.Popen(
            [sys.executable, "-c", _CRASHING_SAVE, str(pathlib.Path(__file__).parent), str(tmp_path / how), how],
            stderr=subprocess.PIPE,
            text=True,
        )
        for how in hows
    }
    for how, child in children.items():
        _, err = child.communicate(timeout=60)
        assert child.returncode == -signal.SIGKILL, f"{how}: {err}"
    for how in hows:
        root = tmp_path / how
        s = _session()
        s.dataloader = Loader()
        _assert_loads_step_1(s, root / "a")
        if how == "writing":
            assert _visible(root) == ["a"]
            (partial,) = root.glob(".b.partial-*")
            with s, pytest.raises(IncompleteCheckpointError, match=re.escape(repr(str(partial)))):
                s.load_checkpoint(str(partial))
        # The next save clears the dead process's leftovers (putting back an `a` moved aside).
        with s:
            s.save_checkpoint(str(root / "c"))
        assert sorted(os.listdir(root)) == ["a", "c"]
        _assert_loads_step_1(s, root / "a")


@pytest.mark.parametrize("again", [False, True], ids=["new path", "same path"])
def test_a_failed_save_raises_and_leaves_the_previous_checkpoint(tmp_path: pathlib.Path, again: bool) -> None:
    s = _session(max_checkpoints=1)
    s.dataloader = Loader()
    with s:
        _run_and_save(s, tmp_path / "a")
        s.dataloader.fail = True
        with pytest.raises(OSError, match="No space left"):
            _run_and_save(s, tmp_path / ("a" if again else "b"))
    s.dataloader.fail = False
    assert sorted(os.listdir(tmp_path)) == ["a"]
    s.dataloader.position = 0
    _assert_loads_step_1(s, tmp_path / "a")


def test_the_oldest_checkpoint_is_deleted_only_once_the_new_one_is_in_place(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _session(max_checkpoints=2)
    s.dataloader = Loader()
    in_place: list[list[str]] = []
    replace = os.replace

    def watched_replace(src: str, dst: str) -> None:
        replace(src, dst)
        if pathlib.Path(dst).name == "c":
            in_place.append(_visible(tmp_path))

    monkeypatch.setattr(os, "replace", watched_replace)
    after = []
    with s:
        for name in "abc":
            _run_and_save(s, tmp_path / name)
            after.append(sorted(os.listdir(tmp_path)))
    assert s.dataloader.in_view == [[], ["a"], ["a", "b"]]
    assert in_place == [["a", "b", "c"]]
    assert after == [["a"], ["a", "b"], ["b", "c"]]


def test_a_folder_without_the_completion_mark_is_refused(tmp_path: pathlib.Path) -> None:
    s = _session()
    folder = tmp_path / "ckpt"
    with s:
        s.save_checkpoint(str(folder))
        # As a save interrupted before its end, or an earlier version, leaves it.
        (folder / "checkpoint_complete.json").unlink()
        message = re.escape(repr(str(folder))) + r" is incomplete: it has no 'checkpoint_complete.json'.*previous"
        with pytest.raises(IncompleteCheckpointError, match=message):
            s.load_checkpoint(str(folder))
        with pytest.raises(IncompleteCheckpointError, match=message):
            initialise_memmap_dir_from_checkpoint(str(folder), str(tmp_path / "maps"))
        mark_checkpoint_complete(str(folder))
        s.load_checkpoint(str(folder))
        with pytest.raises(FileNotFoundError, match="nowhere"):
            s.load_checkpoint(str(tmp_path / "nowhere"))
        # Saving over a folder that is not a checkpoint would delete what it holds.
        (tmp_path / "notes").mkdir()
        (tmp_path / "notes" / "todo.txt").write_text("keep")
        with pytest.raises(FileExistsError, match="not a checkpoint folder"):
            s.save_checkpoint(str(tmp_path / "notes"))
    assert (tmp_path / "notes" / "todo.txt").read_text() == "keep"


def _saved_then_changed(tmp_path: pathlib.Path, memmap_dir: pathlib.Path | None = None) -> TaskSession:
    """A session that saved `ckpt` after one step (w = W + 1, step 1, dataloader at 1, steps 1), then moved on."""
    s = _session(memmap_dir=memmap_dir)
    s.dataloader = Loader()
    with s:
        _run_and_save(s, tmp_path / "ckpt")
        s.run({s.inputs.x: np.full(4, 10.0, np.float32)})
    s.dataloader.position = 5
    return s


def _assert_unchanged(s: TaskSession) -> None:
    """The state `_saved_then_changed` left: w = W + 11, step 2, dataloader at 5, steps 2."""
    np.testing.assert_array_equal(s.get_named_tensors_data().w, W + 11)
    assert s.get_named_tensors_data().step == 2
    assert s.session_state == {"steps": 2} and s.dataloader.position == 5


@pytest.mark.parametrize("content", ["[]", "{not json", '{"lr": 1}', '{"steps": "2"}'])
def test_a_corrupt_session_state_changes_nothing(tmp_path: pathlib.Path, content: str) -> None:
    s = _saved_then_changed(tmp_path)
    info = tmp_path / "ckpt" / "session_info.json"
    info.write_text(content)
    with s:
        with pytest.raises(CheckpointError, match=re.escape(repr(str(info)))):
            s.load_checkpoint(str(tmp_path / "ckpt"))
        _assert_unchanged(s)
    assert s.dataloader.resumed == []


def test_a_checkpoint_without_session_state_loads_from_no_steps(tmp_path: pathlib.Path) -> None:
    """As popxl-addons' TaskSession loads one (its own test removes the file and loads with report_missing
    "error")."""
    s = _saved_then_changed(tmp_path)
    (tmp_path / "ckpt" / "session_info.json").unlink()
    with s:
        s.load_checkpoint(str(tmp_path / "ckpt"), report_missing="error")
    assert s.session_state == {"steps": 0}


def test_a_truncated_npz_names_its_file_and_changes_nothing(tmp_path: pathlib.Path) -> None:
    s = _saved_then_changed(tmp_path)
    path = tmp_path / "ckpt" / "model" / "w.npz"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with s:
        with pytest.raises(CheckpointError, match=re.escape(repr(str(path))) + " is not a readable .npz"):
            s.load_checkpoint(str(tmp_path / "ckpt"))
        _assert_unchanged(s)


def test_array_headers_are_checked_before_any_data_is_read(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _saved_then_changed(tmp_path)
    path = tmp_path / "ckpt" / "model" / "step.npz"
    # A large compressed member of the wrong shape: refused from its header, never inflated or loaded.
    np.savez_compressed(path, step=np.zeros((4096, 4096), np.float32))

    def no_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("data read before every header was checked")

    monkeypatch.setattr(np, "load", no_load)
    with s:
        message = (
            re.escape(repr(str(path))) + r" holds float32 \(4096, 4096\) for variable 'step', which is float32 \(\)"
        )
        with pytest.raises(CheckpointError, match=message):
            s.load_checkpoint(str(tmp_path / "ckpt"))
        np.savez(path, step=np.float64(1))
        with pytest.raises(CheckpointError, match=r"holds float64 \(\) for variable 'step'"):
            s.load_checkpoint(str(tmp_path / "ckpt"))
        _assert_unchanged(s)


def test_a_missing_dataloader_file_or_a_failed_resume_changes_nothing(tmp_path: pathlib.Path) -> None:
    s = _saved_then_changed(tmp_path)
    path = tmp_path / "ckpt" / "dataloader.bin"
    path.write_text("not a position")
    with s:
        with pytest.raises(CheckpointError, match=re.escape(repr(str(path))) + ": the dataloader cannot resume"):
            s.load_checkpoint(str(tmp_path / "ckpt"))
        s.dataloader.position = 5
        _assert_unchanged(s)
        path.unlink()
        with pytest.raises(CheckpointError, match=re.escape(repr(str(path))) + " is missing"):
            s.load_checkpoint(str(tmp_path / "ckpt"))
        _assert_unchanged(s)


def test_memory_mapped_variables_are_loaded(tmp_path: pathlib.Path) -> None:
    s = _saved_then_changed(tmp_path, memmap_dir=tmp_path / "maps")
    assert json.loads((tmp_path / "ckpt" / "memmap.json").read_text()) == {"w": "model.w.npy", "step": "model.step.npy"}
    with s:
        s.load_checkpoint(str(tmp_path / "ckpt"), report_missing="error")
        np.testing.assert_array_equal(s.get_named_tensors_data().w, W + 1)
    assert s.get_named_tensors_data().step == 1 and s.session_state["steps"] == 1
    np.testing.assert_array_equal(np.memmap(str(tmp_path / "maps" / "model.w.npy"), np.float32, "r", shape=(4,)), W + 1)
    # Into a session without maps, and back into maps from a checkpoint of one without.
    plain = _session()
    plain.dataloader = Loader()
    with plain:
        plain.load_checkpoint(str(tmp_path / "ckpt"), report_missing="error")
        np.testing.assert_array_equal(plain.get_named_tensors_data().w, W + 1)
        plain.run({plain.inputs.x: np.ones(4, np.float32)})
        plain.save_checkpoint(str(tmp_path / "plain"))
    with s:
        s.load_checkpoint(str(tmp_path / "plain"), report_missing="error")
        np.testing.assert_array_equal(s.get_named_tensors_data().w, W + 2)


def test_skip_memmap_leaves_memory_mapped_variables_and_read_only_maps_need_it(tmp_path: pathlib.Path) -> None:
    s = _saved_then_changed(tmp_path, memmap_dir=tmp_path / "maps")
    with s:
        s.load_checkpoint(str(tmp_path / "ckpt"), skip_memmap=True)
        np.testing.assert_array_equal(s.get_named_tensors_data().w, W + 11)
    assert s.session_state["steps"] == 1
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.memmap(str(tmp_path / "maps" / "model.w.npy"), np.float32, "r", shape=(4,)), name="w")
    ro = TaskSession([], [], NamedTensors(w=w), 1, ir, "cpu", weights_to_host_on_exit=False)
    with ro:
        with pytest.raises(CheckpointError, match=r"'w' is a read-only memory map.*skip_memmap=True"):
            ro.load_checkpoint(str(tmp_path / "ckpt"))
        ro.load_checkpoint(str(tmp_path / "ckpt"), skip_memmap=True)
        np.testing.assert_array_equal(ro.get_tensor_data(w), W + 11)
    assert task_session.CheckpointError is CheckpointError


@pytest.mark.placement
@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "one-at-a-time"])
def test_a_checkpoint_of_state_on_disk_is_saved_and_loaded(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, streamed: bool
) -> None:
    """Remote variables whose buffer lives in files (the disk tier) go into a checkpoint and come back from it,
    read whole or, where memory could not hold the state, one variable at a time after every file is checked."""
    if streamed:
        monkeypatch.setattr(task_session, "_memory_available", lambda: 0)
    # Entries larger than zipfile's read buffer, so that only reading an array through checks its checksum.
    big = np.arange(1 << 14, dtype=np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer(big.shape, popxl.float32, entries=3)
        weights = [popxl.remote_variable(big + 10 * k, buffer, k, name=f"w{k}") for k in range(3)]
        for k in range(3):
            ops.remote_store(buffer, k, ops.remote_load(buffer, k) * 2.0)
    state = NamedTensors.from_dict({f"w{k}": w for k, w in enumerate(weights)})
    session = TaskSession([], [], state, 1, ir, "cpu", remote_dir=tmp_path / "tier")
    with session:
        session.run()
        session.save_checkpoint(str(tmp_path / "ckpt"))
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(weights[1]), (big + 10) * 4)
        session.load_checkpoint(str(tmp_path / "ckpt"))
        for k, w in enumerate(weights):
            np.testing.assert_array_equal(session.get_tensor_data(w), (big + 10 * k) * 2)
        assert session.session_state["steps"] == 1
        if streamed:  # a file whose data no longer matches its checksum is found before anything is written
            damaged = tmp_path / "ckpt" / "model" / "w2.npz"
            data = bytearray(damaged.read_bytes())
            data[-4096] ^= 0xFF  # inside the array's data, near its end
            damaged.write_bytes(bytes(data))
            session.run()
            with pytest.raises(CheckpointError, match=r"w2\.npz"):
                session.load_checkpoint(str(tmp_path / "ckpt"))
            for k, w in enumerate(weights):
                np.testing.assert_array_equal(session.get_tensor_data(w), (big + 10 * k) * 4)


# Trains remote variables on disk for a step, saves a checkpoint, and dies by SIGKILL in the middle of the next
# step, once it has stored an entry.
_KILLED_MID_STEP = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from popxl.lowering.disk_tier import DiskTier
from test_task_session import _disk_session

root = sys.argv[2]
session, _ = _disk_session(root)
with session:
    session.run()
    session.save_checkpoint(os.path.join(root, "ckpt"))
    store = DiskTier.store
    def store_then_die(self, *args):
        store(self, *args)  # the file is marked as being written before the store returns
        os.kill(os.getpid(), signal.SIGKILL)
    DiskTier.store = store_then_die
    session.run()
"""


def _disk_session(root: str) -> tuple[TaskSession, list[popxl.Variable]]:
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((1 << 12,), popxl.float32, entries=2)
        weights = [popxl.remote_variable(np.full(1 << 12, k + 1, np.float32), buffer, k, name=f"w{k}") for k in (0, 1)]
        for k in (0, 1):
            ops.remote_store(buffer, k, ops.remote_load(buffer, k) * 3.0)
    state = NamedTensors.from_dict({f"w{k}": w for k, w in enumerate(weights)})
    return TaskSession([], [], state, 1, ir, "cpu", remote_dir=os.path.join(root, "tier")), weights


@pytest.mark.slow
def test_a_process_killed_mid_step_leaves_its_checkpoint_loadable(tmp_path: pathlib.Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_STEP, str(pathlib.Path(__file__).parent), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    # The disk tier's file of the killed run says it was being written, and is refused as it is.
    (left,) = (tmp_path / "tier").glob("*.bin")
    with pytest.raises(OSError, match="process stopped"):
        RemoteFile.open(left)
    session, weights = _disk_session(str(tmp_path))
    with session:
        session.load_checkpoint(str(tmp_path / "ckpt"))
        for k, w in enumerate(weights):
            np.testing.assert_array_equal(session.get_tensor_data(w), np.full(1 << 12, 3 * (k + 1), np.float32))
        assert session.session_state["steps"] == 1
