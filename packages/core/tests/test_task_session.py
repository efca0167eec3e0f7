"""TaskSession: named state, step counting, and checkpoints written to and read from folders."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl_addons.core import NamedTensors, NamedVariableFactories, TaskSession, VariableFactory

W = np.arange(4, dtype=np.float32)


class Loader:
    """A dataloader that records where it was saved and resumed from."""

    def __init__(self) -> None:
        self.position = 0
        self.resumed: list[str] = []

    def save(self, filename: str) -> None:
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
