"""Replica-sharded variables and their on-device shards, `shard_over`, and popxl's seed helpers, against NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.extension import loaded_variable

MODES = ["devices", "simulate"]


def _shard_of(full: np.ndarray, k: int, parts: int) -> np.ndarray:
    """Part `k` of `full` flattened and zero-padded into `parts` equal parts (NumPy's reference)."""
    c = math.ceil(full.size / parts)
    padded = np.concatenate([full.ravel(), np.zeros(c * parts - full.size, full.dtype)])
    return padded[k * c : (k + 1) * c]


@pytest.mark.parametrize("mode", MODES)
def test_shards_follow_shard_over_and_updates_reach_the_whole_variable(mode: str) -> None:
    # Eight replicas, data-parallel groups of stride 2 (two groups of four), each value sharded over two members.
    ir = popxl.Ir(replication=8)
    data = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    with ir.main_graph:
        grouping = ir.replica_grouping(stride=2)
        whole, shard = popxl.replica_sharded_variable(data, popxl.float32, "w", replica_grouping=grouping, shard_over=2)
        assert (whole.shape, whole.meta_shape) == ((8,), (3, 5)) and whole.shape_on_host == (2, 3, 5)
        assert (shard.shape, shard.meta_shape) == ((8,), (3, 5))
        seen = popxl.d2h_stream(shard.shape, shard.dtype, "seen")
        ops.host_store(seen, shard)
        ops.var_updates.accumulate_(shard, popxl.constant(np.ones(8, np.float32)))
    with popxl.Session(ir, "cpu", replica_mode=mode) as s:
        first = s.run()[seen]
        s.run()
        np.testing.assert_array_equal(s.get_tensor_data(whole), data + 2)
        s.write_variable_data(whole, np.zeros_like(data))
        after_write = s.run()[seen]
    for r in range(8):
        members = grouping.members(grouping.group_of(r))
        rank = members.index(r) % 2
        np.testing.assert_array_equal(first[r], _shard_of(data[grouping.group_of(r)], rank, 2))
        np.testing.assert_array_equal(after_write[r], _shard_of(np.zeros((3, 5), np.float32), rank, 2))
    # The session leaves the updated shards on the host: the whole value plus one run, zero padding dropped.
    np.testing.assert_array_equal(s.get_tensor_data(whole), np.ones_like(data))


def test_whole_variable_is_the_one_read_and_written() -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        whole, shard = popxl.replica_sharded_variable(np.ones(4, np.float32), name="w")
        with pytest.raises(ValueError, match="already has a loaded value"):
            loaded_variable(whole)
    with popxl.Session(ir, "cpu") as s:
        with pytest.raises(TypeError, match=r"on-device value of .*read 'w'"):
            s.get_tensor_data(shard)
        with pytest.raises(TypeError, match="write 'w'"):
            s.write_variable_data(shard, np.ones(2, np.float32))


@pytest.mark.placement
def test_sharded_variable_needs_replicas_and_a_dividing_shard_over() -> None:
    with popxl.Ir(replication=1).main_graph, pytest.raises(ValueError, match="replication factor above 1"):
        popxl.replica_sharded_variable(np.ones(4, np.float32), name="w")
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        # A plain buffer of the shard's shape takes the variable's shape as its meta shape, as in popxl.
        buf = popxl.remote_buffer((2,), popxl.float32)
        v = popxl.remote_replica_sharded_variable(np.ones(8, np.float32), buf, name="v")
        assert buf.meta_shape == (8,) and v.meta_shape == (8,)
        with pytest.raises(ValueError, match=r"needs a buffer of .* \(\(2,\), popxl.float32, \(5,\)\), got \(\(3,\)"):
            popxl.remote_replica_sharded_variable(np.ones(5, np.float32), popxl.remote_buffer((3,), popxl.float32))
        with pytest.raises(ValueError, match="shard_over=3 must divide the group size 4"):
            popxl.replica_sharded_variable(np.ones(6, np.float32), shard_over=3)


@pytest.mark.placement
def test_loaded_remote_variable_keeps_in_place_updates() -> None:
    ir = popxl.Ir(replication=2)
    data = np.arange(4, dtype=np.float32).reshape(2, 2)
    with ir.main_graph:
        grouping = ir.replica_grouping(group_size=1)
        v = popxl.remote_variable(data, popxl.remote_buffer((2,), popxl.float32), replica_grouping=grouping)
        loaded = loaded_variable(v)
        out = popxl.d2h_stream((2,), popxl.float32, "out")
        ops.host_store(out, loaded)
        ops.var_updates.copy_var_update_(loaded, loaded * 2.0)
    with popxl.Session(ir, "cpu") as s:
        np.testing.assert_array_equal(s.run()[out], data)
        np.testing.assert_array_equal(s.run()[out], data * 2)
    np.testing.assert_array_equal(s.get_tensor_data(v), data * 4)


def test_create_seeds_matches_numpy_words() -> None:
    seeds = popxl.create_seeds(1984, offset=3, batches_per_step=2, gradient_accumulation_factor=1, replicas=4)
    draws = np.random.default_rng(1987).integers(0, 2**64 - 1, endpoint=True, dtype=np.uint64, size=8)
    words = np.stack([draws >> np.uint64(32), draws & np.uint64(2**32 - 1)], axis=-1).astype(np.uint32)
    assert seeds.shape == (2, 4, 2) and seeds.dtype == np.uint32
    np.testing.assert_array_equal(seeds, words.reshape(2, 4, 2))
    assert popxl.create_seeds(5).shape == (2,)
    for n in (0, 1, 2**32, 2**64 - 1, int(draws[0])):
        assert popxl.two_uint32_to_uint64(*popxl.uint64_to_two_uint32(n)) == n
    with pytest.raises(ValueError, match="uint64"):
        popxl.uint64_to_two_uint32(2**64)
    with pytest.raises(ValueError, match="uint32"):
        popxl.two_uint32_to_uint64(-1, 0)
