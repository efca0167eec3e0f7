"""popxl's documented semantics where a plausible implementation gives different numbers."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.transforms import autodiff


@pytest.mark.parametrize("mode", ["simulate", "devices"])
def test_all_gather_gradient_is_each_replicas_own_part_of_its_gradient(mode: str) -> None:
    replicas = 4
    x = np.random.default_rng(0).normal(size=(replicas, 3)).astype(np.float32)
    dy = np.random.default_rng(1).normal(size=(replicas, replicas * 3)).astype(np.float32)
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        hx = popxl.h2d_stream((3,), popxl.float32, "x")
        hdy = popxl.h2d_stream((replicas * 3,), popxl.float32, "dy")
        graph = ir.create_graph(lambda t: ops.collectives.replicated_all_gather(t), hx.spec)
        info = autodiff(graph)
        site = ops.call_with_info(graph, ops.host_load(hx))
        (dx,) = ops.call(info.graph, ops.host_load(hdy), inputs_dict=info.inputs_dict(site))
        out = popxl.d2h_stream((3,), popxl.float32, "dx")
        ops.host_store(out, dx)
    with popxl.Session(ir, "cpu", replica_mode=mode) as session:
        got = session.run({hx: x, hdy: dy})[out]
    # popart: the all-gather's gradient is a 'local' reduce-scatter, replica r keeping elements 3r..3r+2.
    expected = np.stack([dy[r, 3 * r : 3 * r + 3] for r in range(replicas)])
    np.testing.assert_array_equal(got, expected)


def test_call_modifies_the_parent_tensor_only_where_marked() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x = popxl.variable(np.int32(1), name="x")
        bump = ir.create_graph(lambda t: ops.var_updates.accumulate_(t, popxl.constant(np.int32(1))), x)
        ops.call(bump, x)
        before = popxl.d2h_stream((), popxl.int32, "before")
        ops.host_store(before, x)
        info = ops.call_with_info(bump, x)
        info.set_parent_input_modified(x)
        after = popxl.d2h_stream((), popxl.int32, "after")
        ops.host_store(after, x)
    with popxl.Session(ir, "cpu") as session:
        outputs = session.run()
        final = session.get_tensor_data(x)
    # The first call's graph input is a copy: x stays 1. The second call is marked: x becomes 2.
    assert outputs[before] == 1 and outputs[after] == 2 and final == 2


@pytest.mark.parametrize("mode", ["simulate", "devices"])
def test_replicated_slice_drops_an_axis_of_one_part_and_gathers_its_gradient(mode: str) -> None:
    replicas = 4
    data = np.random.default_rng(2).random((replicas, 4, 3)).astype(np.float32)
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        x = popxl.variable(data, popxl.float32, name="x")
        graph = ir.create_graph(lambda t: ops.collectives.replicated_slice(t), x)
        dgraph = autodiff(graph)
        (y,) = ops.call(graph, x)
        (dx,) = ops.call(dgraph.graph, y)
        ys = popxl.d2h_stream(y.shape, y.dtype, "y")
        dxs = popxl.d2h_stream(dx.shape, dx.dtype, "dx")
        ops.host_store(ys, y)
        ops.host_store(dxs, dx)
    assert y.shape == (4, 3)
    with popxl.Session(ir, "cpu", replica_mode=mode) as session:
        outputs = session.run()
    np.testing.assert_array_equal(outputs[ys], data)
    for r in range(replicas):
        np.testing.assert_array_equal(outputs[dxs][r], data)


def test_replicated_slice_of_several_parts_keeps_the_axis() -> None:
    replicas = 2
    data = np.arange(2 * 6, dtype=np.float32).reshape(2, 6)
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        x = popxl.variable(data, name="x")
        y = ops.collectives.replicated_slice(x, axis=1)
        ys = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(ys, y)
    assert y.shape == (2, 3)
    with popxl.Session(ir, "cpu") as session:
        got = session.run()[ys]
    np.testing.assert_array_equal(got, np.stack([data[:, :3], data[:, 3:]]))


def test_host_only_dtypes_are_refused_for_tensors_by_name() -> None:
    assert popxl.dtype.as_dtype(np.float64) is popxl.float64 and popxl.dtype.as_dtype("double") is popxl.float64
    assert popxl.dtype.as_dtype(np.float32) is popxl.float32 and popxl.dtypes.dtype.from_name("half") is popxl.float16
    with popxl.Ir().main_graph:
        for dt in (popxl.float64, popxl.int64, popxl.complex64):
            with pytest.raises(TypeError, match=f"Tensors of popxl.{dt.name} are not supported here"):
                popxl.constant(np.zeros(2), dt)
        # Data of 64-bit types narrows as popxl narrows it when no dtype is asked for.
        assert popxl.constant(np.zeros(2, np.float64)).dtype is popxl.float32


def test_decompose_sum_keeps_gradient_chains_of_two_input_adds() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        spec = popxl.TensorSpec((3,), popxl.float32)
        graph = ir.create_graph(lambda x: ops.sin(x) + ops.cos(x) + x * x, spec)
        grad = popxl.transforms.autodiff(graph).graph
        before = list(grad.ops)
        assert popxl.transforms.decompose_sum(grad) is grad and list(grad.ops) == before
        assert all(len(op.inputs) <= 2 for op in grad.ops if op.name == "add")


def test_engine_options_are_recorded() -> None:
    ir = popxl.Ir()
    opts = ir._pb_ir.getSessionOptions()
    opts.engineOptions["debug.instrument"] = "true"
    assert ir.session_options.engineOptions == {"debug.instrument": "true"}


def test_popdist_replication_outside_a_launch_is_one_instance_of_one_replica() -> None:
    ir = popxl.Ir(replication="popdist")
    assert ir.replication_factor == 1 and ir.instance_replication_factor == 1
    assert ir.session_options.globalReplicationFactor == 1 and ir.session_options.globalReplicaOffset == 0
    with pytest.raises(ValueError, match="replication must be a number of replicas or 'popdist', got 'mpi'"):
        popxl.Ir(replication="mpi")
