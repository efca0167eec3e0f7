"""Variable factories keeping their variables' data in memory-mapped files."""

from __future__ import annotations

import pathlib

import numpy as np

import popxl
from popxl import ops
from popxl_addons.core import NamedVariableFactories, VariableFactory, named_variable_buffers

W = np.arange(6, dtype=np.float32).reshape(2, 3)


def _factories() -> NamedVariableFactories:
    return NamedVariableFactories(w=VariableFactory(lambda: W.copy(), popxl.float32, "w"))


def test_init_writes_files_and_sessions_write_updates_back(tmp_path: pathlib.Path) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        variables = _factories().init("model", memmap_dir=tmp_path)
        ops.var_updates.accumulate_(variables.w, popxl.constant(np.ones((2, 3), np.float32)))
    stored = np.memmap(str(tmp_path / "model.w.npy"), dtype=np.float32, shape=(2, 3), mode="r")
    np.testing.assert_array_equal(stored, W)
    with popxl.Session(ir, "cpu") as s:
        s.run()
    assert isinstance(s.get_tensor_data(variables.w), np.memmap)
    np.testing.assert_array_equal(np.memmap(str(tmp_path / "model.w.npy"), np.float32, "r", shape=(2, 3)), W + 1)

    # A later program starts from the file's values, read-only if asked.
    ir2 = popxl.Ir()
    with ir2.main_graph:
        again = _factories().init("model", memmap_dir=tmp_path, read_only_if_exists=True)
    np.testing.assert_array_equal(popxl.Session(ir2, "cpu").get_tensor_data(again.w), W + 1)
    assert not again.w.host_data.flags.writeable


def test_remote_variables_from_files(tmp_path: pathlib.Path) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        factories = _factories()
        buffers = named_variable_buffers(factories)
        variables = factories.init_remote(buffers, 0, "remote", memmap_dir=tmp_path)
        out = popxl.d2h_stream((2, 3), popxl.float32, "w")
        ops.host_store(out, ops.remote_load(buffers.w, 0))
    with popxl.Session(ir, "cpu") as s:
        np.testing.assert_array_equal(s.run()[out], W)
    assert variables.w.is_memmap and (tmp_path / "remote.w.npy").exists()
