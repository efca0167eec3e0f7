"""Replica groupings, grouped variables, collectives and sharding against NumPy, in both replica modes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.transforms import autodiff

MODES = ["devices", "simulate"]


def _group_rank(r: int, stride: int, size: int) -> tuple[int, int]:
    return (r // (stride * size)) * stride + r % stride, (r % (stride * size)) // stride


def _groupings(n: int) -> list[tuple[int, int]]:
    return [(s, g) for s in range(1, n + 1) for g in range(2, n + 1) if n % (s * g) == 0]


def _members(n: int, stride: int, size: int) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for r in range(n):
        g, _ = _group_rank(r, stride, size)
        groups.setdefault(g, []).append(r)
    return groups


@pytest.mark.parametrize(
    ("stride", "size", "assignment"),
    [
        (1, 8, [0] * 8),
        (1, 1, list(range(8))),
        (1, 2, [0, 0, 1, 1, 2, 2, 3, 3]),
        (2, 2, [0, 1, 0, 1, 2, 3, 2, 3]),
        (2, 4, [0, 1, 0, 1, 0, 1, 0, 1]),
        (4, 2, [0, 1, 2, 3, 0, 1, 2, 3]),
    ],
)
def test_grouping_assignment(stride: int, size: int, assignment: list[int]) -> None:
    g = popxl.Ir(replication=8).replica_grouping(stride, size)
    assert g.assignment == assignment and g.num_groups == max(assignment) + 1
    assert [g.rank_of(r) for r in range(8)] == [_group_rank(r, g.stride, size)[1] for r in range(8)]


def test_grouping_transpose_and_validation() -> None:
    ir = popxl.Ir(replication=8)
    t = ir.replica_grouping(stride=4, group_size=2).transpose()
    assert (t.stride, t.group_size, t.assignment) == (1, 4, [0, 0, 0, 0, 1, 1, 1, 1])
    assert ir.replica_grouping(1, 4).transpose() == ir.replica_grouping(4, 2)
    odd = ir.replica_grouping(2, 2).transpose()
    assert not odd.is_const and odd.assignment == [0, 0, 1, 1, 0, 0, 1, 1]
    for stride, size in [(3, None), (0, None), (1, 9), (4, 4)]:
        with pytest.raises(ValueError):
            ir.replica_grouping(stride, size)
    with pytest.raises(TypeError):
        _ = ir.replica_grouping() == 1
    with ir.main_graph, pytest.raises(NotImplementedError, match="constant stride"):
        ops.collectives.replicated_all_reduce(popxl.constant(np.zeros(2, np.float32)), group=odd)
    # As popxl writes them.
    assert repr(ir.replica_grouping(2, 2)) == "ReplicaGrouping(num_replicas=8, stride=2, group_size=2, num_groups=4)"
    assert repr(odd) == f"ReplicaGrouping(assignment={odd.assignment})"


def _run_replicated(n: int, build: Any, x: np.ndarray[Any, Any], mode: str) -> dict[str, np.ndarray[Any, Any]]:
    ir = popxl.Ir(replication=n)
    with ir.main_graph:
        h = popxl.h2d_stream(x.shape[1:], popxl.float32, "x")
        results = build(ops.host_load(h))
        streams = {k: popxl.d2h_stream(t.shape, t.dtype, k) for k, t in results.items()}
        for k, t in results.items():
            ops.host_store(streams[k], t)
    with popxl.Session(ir, "cpu", replica_mode=mode) as s:
        assert s.replica_mode == mode
        out = s.run({h: x})
    return {k: out[v] for k, v in streams.items()}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [2, 4, 8])
def test_collectives_for_every_grouping(n: int, mode: str) -> None:
    rng = np.random.default_rng(n)
    x = rng.normal(size=(n, 3, 5)).astype(np.float32)
    for stride, size in _groupings(n):

        def build(t: popxl.Tensor, stride: int = stride, size: int = size) -> dict[str, popxl.Tensor]:
            g = popxl.gir().replica_grouping(stride, size)
            c = ops.collectives
            return {
                "sum": c.replicated_all_reduce(t, "add", g),
                "mean": c.replicated_all_reduce(t, "mean", g),
                "max": c.replicated_all_reduce(t, "max", g),
                "gather": c.replicated_all_gather(t, group=g, output_shape="new_axis"),
                "concat": c.replicated_all_gather(t, axis=1, group=g),
                "scatter": c.replicated_reduce_scatter(t, "add", g),
                "shard": c.replica_sharded_slice(t, g),
                "round_trip": c.replicated_all_gather(c.replica_sharded_slice(t, g), group=g),
            }

        out = _run_replicated(n, build, x, mode)
        chunk = math.ceil(15 / size)
        for r in range(n):
            grp, rank = _group_rank(r, stride, size)
            members = _members(n, stride, size)[grp]
            np.testing.assert_allclose(out["sum"][r], x[members].sum(0), rtol=1e-5)
            np.testing.assert_allclose(out["mean"][r], x[members].mean(0), rtol=1e-5)
            np.testing.assert_allclose(out["max"][r], x[members].max(0))
            np.testing.assert_allclose(out["gather"][r], x[members])
            np.testing.assert_allclose(out["concat"][r], np.concatenate(list(x[members]), axis=1))
            padded = np.pad(x[members].sum(0).reshape(-1), (0, chunk * size - 15))
            np.testing.assert_allclose(out["scatter"][r], padded[rank * chunk : (rank + 1) * chunk], rtol=1e-5)
            own = np.pad(x[r].reshape(-1), (0, chunk * size - 15))
            np.testing.assert_allclose(out["shard"][r], own[rank * chunk : (rank + 1) * chunk])
            mixed = np.concatenate(
                [
                    np.pad(x[m].reshape(-1), (0, chunk * size - 15))[k * chunk : (k + 1) * chunk]
                    for k, m in enumerate(members)
                ]
            )
            np.testing.assert_allclose(out["round_trip"][r], mixed[:15].reshape(3, 5))


@pytest.mark.parametrize("mode", MODES)
def test_shard_then_gather_restores_a_value_shared_by_the_group(mode: str) -> None:
    x = np.random.default_rng(3).normal(size=(8, 2, 5)).astype(np.float32)

    def build(t: popxl.Tensor) -> dict[str, popxl.Tensor]:
        g = popxl.gir().replica_grouping(2, 4)
        shared = ops.collectives.replicated_all_reduce(t, group=g)
        shard = ops.collectives.replica_sharded_slice(shared, g)
        assert shard.shape == (3,) and shard.meta_shape == (2, 5)
        return {"shared": shared, "back": ops.collectives.replicated_all_gather(shard, group=g)}

    out = _run_replicated(8, build, x, mode)
    np.testing.assert_allclose(out["back"], out["shared"])


@pytest.mark.parametrize("mode", MODES)
def test_replicated_slice(mode: str) -> None:
    x = np.arange(8 * 4 * 6, dtype=np.float32).reshape(8, 4, 6)

    def build(t: popxl.Tensor) -> dict[str, popxl.Tensor]:
        g = popxl.gir().replica_grouping(1, 2)
        return {"rows": ops.collectives.replicated_slice(t, 0, g), "cols": ops.collectives.replicated_slice(t, 1, g)}

    out = _run_replicated(8, build, x, mode)
    for r in range(8):
        np.testing.assert_array_equal(out["rows"][r], x[r][2 * (r % 2) : 2 * (r % 2) + 2])
        np.testing.assert_array_equal(out["cols"][r], x[r][:, 3 * (r % 2) : 3 * (r % 2) + 3])


@pytest.mark.parametrize("mode", MODES)
def test_grouped_variables_layout(mode: str) -> None:
    ir = popxl.Ir(replication=8)
    data = np.arange(4 * 3, dtype=np.float32).reshape(4, 3)
    with ir.main_graph:
        g = ir.replica_grouping(stride=4, group_size=2)
        v = popxl.variable(data, name="v", replica_grouping=g)
        assert v.shape == (3,) and v.shape_on_host == (4, 3)
        d = popxl.d2h_stream((3,), popxl.float32, "v")
        ops.host_store(d, v)
        ops.var_updates.accumulate_(v, popxl.constant(np.ones(3, np.float32)))
        with pytest.raises(ValueError, match="leading axis of 4"):
            popxl.variable(np.zeros(3, np.float32), replica_grouping=g)
    with popxl.Session(ir, "cpu", replica_mode=mode) as s:
        out = s.run()[d]
        np.testing.assert_array_equal(out, data[[r % 4 for r in range(8)]])
        np.testing.assert_array_equal(s.get_tensor_data(v), data + 1)
        s.write_variable_data(v, data * 10)
        np.testing.assert_array_equal(s.run()[d], (data * 10)[[r % 4 for r in range(8)]])


@pytest.mark.parametrize("mode", MODES)
def test_collective_gradients(mode: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(4, 6)).astype(np.float32)
    dy = rng.normal(size=(4, 6)).astype(np.float32)
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        g = ir.replica_grouping(1, 2)
        h = popxl.h2d_stream((6,), popxl.float32, "x")
        hd = popxl.h2d_stream((6,), popxl.float32, "dy")

        def fwd(t: popxl.Tensor) -> popxl.Tensor:
            c = ops.collectives
            summed = c.replicated_all_reduce(t, group=g)
            return c.replicated_all_gather(
                c.replicated_reduce_scatter(summed * t, group=g), group=g, output_shape="new_axis"
            )

        graph = ir.create_graph(fwd, h.spec)
        info = autodiff(graph)
        site = ops.call_with_info(graph, ops.host_load(h))
        dy_t = ops.reshape(ops.host_load(hd), (2, 3))
        (dx,) = ops.call(info.graph, dy_t, inputs_dict=info.inputs_dict(site))
        d = popxl.d2h_stream((6,), popxl.float32, "dx")
        ops.host_store(d, dx)
    with popxl.Session(ir, "cpu", replica_mode=mode) as s:
        out = s.run({h: x, hd: dy})[d]
    # Within a pair, every member's output is the pair's S * S (S = x_a + x_b) reduce-scattered and
    # gathered back. popxl's all-gather gradient gives each member its own part of its own dy (rank k:
    # elements 3k..3k+2); the reduce-scatter's gradient gathers those parts, so d (S*S) =
    # concat(dy_a[:3], dy_b[3:]) on both members, and d (S*S) / d x_m = 2 S.
    expected = np.zeros_like(x)
    for a, b in ([0, 1], [2, 3]):
        s_sum = x[a] + x[b]
        g_s2 = np.concatenate([dy[a][:3], dy[b][3:]])
        for m in (a, b):
            expected[m] = g_s2 * 2 * s_sum
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_modes_agree_to_rounding() -> None:
    x = np.random.default_rng(9).normal(size=(8, 4, 4)).astype(np.float32)

    def build(t: popxl.Tensor) -> dict[str, popxl.Tensor]:
        c = ops.collectives
        g = popxl.gir().replica_grouping(2, 2)
        y = ops.tanh(t @ t) + c.replicated_all_reduce(t, group=g)
        return {
            "y": c.replicated_all_gather(
                c.replica_sharded_slice(y, popxl.gir().replica_grouping(4, 2)), group=popxl.gir().replica_grouping(4, 2)
            )
        }

    a = _run_replicated(8, build, x, "devices")["y"]
    b = _run_replicated(8, build, x, "simulate")["y"]
    # The modes are differently fused XLA programs of the same maths, so they agree to rounding (docs/runtime.md),
    # to the bit only on some processors. Whatever its order or fusion, an entry of t @ t (4 products summed) is
    # within g4 = 4u / (1 - 4u) times that entry of |t| @ |t| of the exact value (u = 2**-24); tanh, of slope at
    # most 1, passes the difference on and adds its own error (taken as 2**-21: XLA's float32 tanh is within
    # 2.7e-7); the pair's sum is the same add in both, the final add rounds once in each, and the slicing and
    # gathering move data only. A replica taking another's data or group would be off by far more.
    u = 2.0**-24
    g4 = 4 * u / (1 - 4 * u)
    # The largest entry of |t| @ |t| over the replicas.
    magnitude = max(float((np.abs(t.astype(np.float64)) @ np.abs(t.astype(np.float64))).max()) for t in x)
    bound = 2 * g4 * magnitude + 2 * 2.0**-21 + u / (1 - u) * (np.abs(a) + np.abs(b))
    error = np.abs(a.astype(np.float64) - b)
    assert (error <= bound).all(), f"{int((error > bound).sum())} values beyond the rounding bound: {error.max()}"


def test_inexpressible_groupings_are_refused() -> None:
    ir = popxl.Ir(replication=6)
    with ir.main_graph:
        t = popxl.constant(np.zeros(2, np.float32))
        ops.collectives.replicated_all_reduce(t, group=ir.replica_grouping(1, 2))
        ops.collectives.replicated_all_reduce(t, group=ir.replica_grouping(1, 3))
    with pytest.raises(ValueError, match="cannot be expressed together"):
        popxl.Session(ir, "cpu")


@pytest.mark.placement
def test_remote_variable_round_trip() -> None:
    data = np.arange(3, dtype=np.float32)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        buf = popxl.remote_buffer((3,), popxl.float32, entries=2)
        v = popxl.remote_variable(data, buf, 1, name="v")
        loaded = ops.remote_load(buf, 1)
        ops.remote_store(buf, 1, loaded * 2.0)
        d = popxl.d2h_stream((3,), popxl.float32, "y")
        ops.host_store(d, loaded)
        with pytest.raises(ValueError, match="needs a buffer"):
            popxl.remote_variable(np.zeros(4, np.float32), buf)
    with popxl.Session(ir, "cpu") as s:
        np.testing.assert_array_equal(s.run()[d], data)
        np.testing.assert_array_equal(s.run()[d], data * 2)
        np.testing.assert_array_equal(s.get_tensor_data(v), data * 4)
        s.write_variable_data(v, np.full(3, 7, np.float32))
        np.testing.assert_array_equal(s.run()[d], 7)


@pytest.mark.placement
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("grouped", [False, True])
def test_remote_replica_sharded_variable(mode: str, grouped: bool) -> None:
    ir = popxl.Ir(replication=4)
    groups = 2 if grouped else 1
    data = np.arange(groups * 15, dtype=np.float32).reshape(groups, 3, 5)
    host = data if grouped else data[0]
    with ir.main_graph, popxl.in_sequence(True):
        grouping = ir.replica_grouping(1, 2) if grouped else ir.replica_grouping()
        buf = popxl.replica_sharded_buffer(host.shape, popxl.float32, grouping)
        v = popxl.remote_replica_sharded_variable(host, buf, 0, name="v", replica_grouping=grouping)
        assert v.shape == buf.tensor_shape and v.meta_shape == (3, 5) and v.shape_on_host == host.shape
        shard = ops.remote_load(buf, 0)
        full = ops.collectives.replicated_all_gather(shard, group=grouping)
        ops.remote_store(buf, 0, shard + 1.0)
        d = popxl.d2h_stream((3, 5), popxl.float32, "full")
        ops.host_store(d, full)
    with popxl.Session(ir, "cpu", replica_mode=mode) as s:
        out = s.run()[d]
        np.testing.assert_array_equal(s.get_tensor_data(v), host + 1)
    for r in range(4):
        np.testing.assert_array_equal(out[r], data[r // 2 if grouped else 0])
