"""seed_variable: one seed per replica group, drawn as popxl draws them, updated in place across runs."""

from __future__ import annotations

import numpy as np

import popxl
from popxl import ops
from popxl_addons.core import seed_variable


def test_seed_per_group_and_in_place_updates_persist() -> None:
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        grouping = ir.replica_grouping(group_size=2)
        var, seed = seed_variable(1984, grouping)
        seen = popxl.d2h_stream((2,), popxl.uint32, "seen")
        ops.host_store(seen, seed)
        # Advance the seed in place, as a training step does before its random ops.
        ops.var_updates.copy_var_update_(seed, seed + popxl.constant(np.array([0, 1], np.uint32)))
    draws = np.random.default_rng(1984).integers(0, 2**64 - 1, endpoint=True, dtype=np.uint64, size=2)
    expected = np.stack([draws >> np.uint64(32), draws & np.uint64(2**32 - 1)], axis=-1).astype(np.uint32)
    with popxl.Session(ir, "cpu") as s:
        first = s.run()[seen]
        second = s.run()[seen]
        np.testing.assert_array_equal(s.get_tensor_data(var), expected + np.array([0, 2], np.uint32))
    for r in range(4):
        np.testing.assert_array_equal(first[r], expected[grouping.group_of(r)])
        np.testing.assert_array_equal(second[r], expected[grouping.group_of(r)] + np.array([0, 1], np.uint32))


def test_default_is_one_seed_per_replica() -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        var, seed = seed_variable(7)
        assert var.shape_on_host == (2, 2) and seed.shape == (2,) and seed.dtype == popxl.uint32
    with popxl.Session(ir, "cpu") as s:
        values = s.get_tensor_data(var)
    assert not np.array_equal(values[0], values[1])
