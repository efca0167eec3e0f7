"""Variable factories keeping their variables' data in memory-mapped files."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl_addons.core import NamedVariableFactories, VariableFactory, named_variable_buffers
from popxl_addons.core.modules.variable_factory import Filled

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


@pytest.mark.placement
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


def test_a_factory_hands_the_arrays_it_makes_to_its_variables_without_a_copy() -> None:
    mine = np.ones((2, 3), np.float32)
    made: list[np.ndarray] = []

    def fresh() -> np.ndarray:
        made.append(np.full((2, 3), 2, np.float64))  # cast by the factory: a new array of its own
        return made[-1]

    with popxl.Ir().main_graph:
        zeros = VariableFactory(Filled((2, 3), np.float32)).create_tensor()
        cast = VariableFactory(fresh, popxl.float32).create_tensor()
        given = VariableFactory(lambda: mine).create_tensor()
    # Filled's arrays and the factory's casts are read-only, and held as they are; an array the caller
    # still holds, writable, is copied as popxl copies it.
    assert not zeros.host_data.flags.writeable and not cast.host_data.flags.writeable
    np.testing.assert_array_equal(zeros.host_data, np.zeros((2, 3)))
    np.testing.assert_array_equal(cast.host_data, made[-1])
    assert not np.shares_memory(given.host_data, mine)
    mine += 1
    np.testing.assert_array_equal(given.host_data, np.ones((2, 3)))


def test_a_file_of_another_shape_is_refused_and_left_as_it_is(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "model.w.npy"
    np.arange(4, dtype=np.float32).tofile(path)  # 16 bytes: a (2, 2) float32, not the (2, 3) asked for
    before = path.read_bytes()
    ir = popxl.Ir()
    with ir.main_graph, pytest.raises(ValueError, match=r"16 bytes.*needs 24"):
        _factories().init("model", memmap_dir=tmp_path)
    assert path.read_bytes() == before


@pytest.mark.placement
def test_remote_variables_from_files_with_the_disk_tier(tmp_path: pathlib.Path) -> None:
    """popxl-addons' memmap_dir with remote buffers on disk: each run's updates reach the maps at detach."""
    ir = popxl.Ir()
    with ir.main_graph:
        factories = _factories()
        buffers = named_variable_buffers(factories)
        variables = factories.init_remote(buffers, 0, "remote", memmap_dir=tmp_path / "maps")
        loaded = ops.remote_load(buffers.w, 0)
        ops.remote_store(buffers.w, 0, loaded + 1.0)
    session = popxl.Session(ir, "cpu", remote_dir=tmp_path / "tier")
    with session:
        session.run()
        session.run()
    stored = np.memmap(str(tmp_path / "maps" / "remote.w.npy"), np.float32, "r", shape=(2, 3))
    np.testing.assert_array_equal(stored, W + 2)
    np.testing.assert_array_equal(session.get_tensor_data(variables.w), W + 2)
