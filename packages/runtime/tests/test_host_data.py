"""Host data as popxl keeps it: memory-mapped variables, "all_replicas" retrieval and arbitrary replica
assignments, against NumPy."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import popxl
from popxl import ops


def _memmap(tmp_path: pathlib.Path, mode: str = "w+", **kw: object) -> np.memmap:
    return np.memmap(str(tmp_path / "w.npy"), dtype=np.float32, shape=(3, 4), mode=mode, **kw)  # type: ignore[call-overload]


def test_memmap_variable_is_written_back_into_its_file(tmp_path: pathlib.Path) -> None:
    data = _memmap(tmp_path)
    data[...] = np.arange(12, dtype=np.float32).reshape(3, 4)
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        v = popxl.variable(data, name="w")
        ops.var_updates.accumulate_(v, popxl.constant(np.ones((3, 4), np.float32)))
    with popxl.Session(ir, "cpu") as s:
        s.run()
    assert s.get_tensor_data(v) is data
    on_disk = np.memmap(str(tmp_path / "w.npy"), dtype=np.float32, shape=(3, 4), mode="r")
    np.testing.assert_array_equal(on_disk, np.arange(12, dtype=np.float32).reshape(3, 4) + 1)


def test_read_only_memmap_never_goes_to_the_host(tmp_path: pathlib.Path) -> None:
    _memmap(tmp_path)[...] = 2.0
    data = _memmap(tmp_path, mode="r")
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(data, name="w")
        ops.var_updates.accumulate_(v, popxl.constant(np.ones((3, 4), np.float32)))
        out = popxl.d2h_stream((3, 4), popxl.float32, "out")
        ops.host_store(out, v)
    with popxl.Session(ir, "cpu") as s:
        np.testing.assert_array_equal(s.run()[out], 3.0)
        with pytest.raises(Exception, match="read-only memmap"):
            s.weights_to_host()
    np.testing.assert_array_equal(s.get_tensor_data(v), 2.0)


def test_memmap_errors_are_popxls(tmp_path: pathlib.Path) -> None:
    with popxl.Ir().main_graph:
        with pytest.raises(ValueError, match="the `dtype` parameter must be None or the same"):
            popxl.variable(_memmap(tmp_path), popxl.float16)
        with pytest.raises(ValueError, match="must already be in C-ordered"):
            popxl.variable(_memmap(tmp_path, order="F"))
        wide = np.memmap(str(tmp_path / "d.npy"), dtype=np.float64, shape=(2,), mode="w+")
        with pytest.raises(ValueError, match="requires downcasting"):
            popxl.variable(wide)


def test_non_const_grouping_copies_a_memmap(tmp_path: pathlib.Path) -> None:
    ir = popxl.Ir(replication=8)
    data = np.memmap(str(tmp_path / "g.npy"), dtype=np.float32, shape=(2, 3), mode="w+")
    with ir.main_graph:
        rg = ir.replica_grouping_from_assignments([0, 0, 1, 1, 0, 0, 1, 1])
        with pytest.warns(UserWarning, match="np.memmap data and a non-const replica grouping"):
            v = popxl.variable(data, replica_grouping=rg)
    assert not v.is_memmap


def test_all_replicas_retrieval_returns_every_replica_in_order() -> None:
    ir = popxl.Ir(replication=4)
    data = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    with ir.main_graph:
        rg = ir.replica_grouping(stride=2, group_size=2)
        v = popxl.variable(data, replica_grouping=rg, retrieval_mode="all_replicas")
        ops.var_updates.accumulate_(v, popxl.constant(np.ones(2, np.float32)))
    s = popxl.Session(ir, "cpu")
    np.testing.assert_array_equal(s.get_tensor_data(v), data[[0, 1, 0, 1]])
    with s:
        s.run()
        np.testing.assert_array_equal(s.get_tensor_data(v), data[[0, 1, 0, 1]] + 1)
        with pytest.raises(NotImplementedError, match='"all_replicas" retrieval mode'):
            s.write_variable_data(v, data)


def test_all_replicas_values_that_came_to_differ_within_a_group_are_kept() -> None:
    # Each replica updates its own copy (as on IPUs); popxl reads every replica's back, and so must detaching.
    ir = popxl.Ir(replication=4)
    data = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    with ir.main_graph:
        rg = ir.replica_grouping(stride=2, group_size=2)
        v = popxl.variable(data, replica_grouping=rg, retrieval_mode="all_replicas")
        x = popxl.h2d_stream((2,), popxl.float32)
        ops.var_updates.accumulate_(v, ops.host_load(x))
    step = np.arange(8, dtype=np.float32).reshape(4, 2)
    s = popxl.Session(ir, "cpu")
    with s:
        s.run({x: step})
    np.testing.assert_array_equal(s.get_tensor_data(v), data[[0, 1, 0, 1]] + step)
    with s:  # placed again from every replica's row
        s.run({x: step})
        np.testing.assert_array_equal(s.get_tensor_data(v), data[[0, 1, 0, 1]] + 2 * step)


def test_assignments_and_their_constant_stride_grouping() -> None:
    ir = popxl.Ir(replication=8)
    assert ir.replica_grouping_from_assignments([0, 1, 0, 1, 2, 3, 2, 3]) == ir.replica_grouping(2, 2)
    rg = ir.replica_grouping_from_assignments([0, 0, 1, 1, 0, 0, 1, 1])
    assert not rg.is_const
    # popxl's own example: the constant grouping splits each group into runs of stride 1.
    assert rg.const_rg.assignment == [0, 0, 1, 1, 2, 2, 3, 3]
    assert (rg.to_device_map, rg.to_host_map) == ([0, 1, 0, 1], [0, 1])
    for bad, message in [
        ([0, 0, 0, 1, 1, 1, 1, 1], "same size"),
        ([1, 1, 1, 1, 2, 2, 2, 2], "start at 0"),
        ([1, 1, 0, 0, 1, 1, 0, 0], "monotonically increasing"),
        ([0, 0, 1, 1], "number of replicas"),
    ]:
        with pytest.raises(ValueError, match=message):
            ir.replica_grouping_from_assignments(bad)


@pytest.mark.placement
def test_remote_variable_in_a_buffer_of_another_shape_of_the_same_size() -> None:
    ir = popxl.Ir(replication=2)
    data = np.array([[5.0], [7.0]], np.float32)
    with ir.main_graph:
        rg = ir.replica_grouping(group_size=1)
        buf = popxl.remote_buffer((1,), popxl.float32)
        v = popxl.remote_variable(data[:, :, None], buf, replica_grouping=rg)
        out = popxl.d2h_stream((1,), popxl.float32, "out")
        ops.host_store(out, ops.remote_load(buf, 0))
    with popxl.Session(ir, "cpu") as s:
        np.testing.assert_array_equal(s.run()[out], data)
    np.testing.assert_array_equal(s.get_tensor_data(v), data[:, :, None])


def test_random_values_follow_each_replicas_seed() -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        seed_in = popxl.h2d_stream((2,), popxl.uint32, "seed")
        out = popxl.d2h_stream((4,), popxl.float32, "r")
        ops.host_store(out, ops.random_normal(ops.host_load(seed_in), (4,)))
    own = popxl.create_seeds(3, replicas=2)
    shared = np.stack([own[0], own[0]])
    with popxl.Session(ir, "cpu") as s:
        independent = s.run({seed_in: own})[out]
        same = s.run({seed_in: shared})[out]
        again = s.run({seed_in: own})[out]
    assert not np.allclose(independent[0], independent[1])
    # One seed through one compiled program gives the same values, whichever replica or run draws them.
    np.testing.assert_array_equal(same[0], same[1])
    np.testing.assert_array_equal(same[0], independent[0])
    np.testing.assert_array_equal(again, independent)


@pytest.mark.parametrize("stride, group_size", [(1, 8), (1, 2), (2, 2), (4, 2), (2, 4), (1, 1)])
def test_variable_settings_name_each_groups_replicas(stride: int, group_size: int) -> None:
    import popart

    ir = popxl.Ir(replication=8)
    rg = ir.replica_grouping(stride=stride, group_size=group_size)
    settings = rg._to_variable_settings("all_replicas")
    assert isinstance(settings, popart.VariableSettings) and not settings.isUsingCommGroup()
    # Groups of `group_size` replicas `stride` apart, in order of their first replica, written out directly.
    span = stride * group_size
    want = [[base + k + j * stride for j in range(group_size)] for base in range(0, 8, span) for k in range(stride)]
    assert settings.groups(8) == want
    assert settings.getGroupCount(8) == len(want) == rg.num_groups
    assert settings.numReplicasReturningVariable(8) == 8
    assert rg._to_variable_settings().numReplicasReturningVariable(8) == len(want)
    assert [settings.getGroupRepresentative(k) for k in range(len(want))] == [g[0] for g in want]
    with pytest.raises(ValueError, match="Invalid retrieval_mode"):
        rg._to_variable_settings("every_replica")
    with pytest.raises(NotImplementedError):
        ir.replica_grouping_from_assignments([0, 0, 1, 1, 0, 0, 1, 1])._to_variable_settings()
