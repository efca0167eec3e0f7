"""Accumulating autodiff and batch_serialise_fwd_and_grad against jax.vjp and NumPy."""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.transforms import ExpectedConnectionType
from popxl_addons.core import (
    IO_MODES,
    Module,
    NamedTensors,
    apply_pre_alias_patterns,
    autodiff_with_accumulation,
    batch_serial_buffer,
    batch_serialise_fwd_and_grad,
)

pytestmark = pytest.mark.placement

rng = np.random.default_rng(11)


class Dense(Module):
    def __init__(self, out: int) -> None:
        super().__init__()
        self.out = out

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("weight", partial(np.zeros, (x.shape[-1], self.out)), x.dtype)
        b = self.add_variable_input("bias", partial(np.zeros, (self.out,)), x.dtype)
        return x @ w + b


class MLP(Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = Dense(6)
        self.fc2 = Dense(3)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        return self.fc2(ops.gelu(self.fc1(x)))


def test_accumulation_graph_layout_and_running_mean() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((4, 2), popxl.float32, "x")
        args, graph = Dense(2).create_graph(h.spec)
        dargs, dgraph = autodiff_with_accumulation(graph, graph.args.tensors, grads_required=graph.graph.inputs[:1])
        info = dgraph.grad_graph_info
        assert [(ec.connection_type, ec.fwd_tensor.name) for ec in info.expected_inputs] == [
            (ExpectedConnectionType.FwdGrad, "add_out"),
            (ExpectedConnectionType.Fwd, "weight"),
            (ExpectedConnectionType.Fwd, "x"),
        ]
        assert [t.name for t in dgraph.graph.inputs[3:]] == ["mean_accum_counter", "accum.bias", "accum.weight"]
        assert all(dgraph.graph.is_by_ref(t) for t in dgraph.graph.inputs[3:])
        assert len(dgraph.graph.outputs) == 1 and sorted(dargs.to_dict()) == [
            "accum.bias",
            "accum.weight",
            "mean_accum_counter",
        ]
        weights = args.init()
        accums = dargs.init()
        dy = popxl.h2d_stream((4, 2), popxl.float32, "dy")
        site = graph.bind(weights).call_with_info(ops.host_load(h))
        (dx,) = dgraph.bind(accums).call(ops.host_load(dy), args=info.inputs_dict(site))
        d = popxl.d2h_stream((4, 2), popxl.float32, "dx")
        ops.host_store(d, dx)
    w = rng.normal(size=(2, 2)).astype(np.float32)
    xs = rng.normal(size=(3, 4, 2)).astype(np.float32)
    dys = rng.normal(size=(3, 4, 2)).astype(np.float32)
    s = popxl.Session(ir, "cpu")
    s.write_variable_data(weights.weight, w)
    with s:
        for x, g in zip(xs, dys):
            np.testing.assert_allclose(s.run({h: x, dy: g})[d], g @ w.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        s.get_tensor_data(accums.accum.weight), np.mean([x.T @ g for x, g in zip(xs, dys)], 0), rtol=1e-5
    )
    np.testing.assert_allclose(s.get_tensor_data(accums.accum.bias), dys.sum(1).mean(0), rtol=1e-5)
    assert s.get_tensor_data(accums.mean_accum_counter) == 3


def _mlp_reference(params: dict[str, Any], x: Any) -> Any:
    h = jax.nn.gelu(x @ params["fc1.weight"] + params["fc1.bias"], approximate=True)
    return h @ params["fc2.weight"] + params["fc2.bias"]


@pytest.mark.parametrize("io_mode", IO_MODES)
@pytest.mark.parametrize("steps", [1, 2, 3])
@pytest.mark.parametrize("rows", [1, 2])
def test_fwd_and_grad_equivalence(io_mode: str, steps: int, rows: int) -> None:
    rng = np.random.default_rng(steps * 10 + rows)
    n = rows - 1
    params = {
        "fc1.weight": rng.normal(size=(4, 6)).astype(np.float32),
        "fc1.bias": rng.normal(size=(6,)).astype(np.float32),
        "fc2.weight": rng.normal(size=(6, 3)).astype(np.float32),
        "fc2.bias": rng.normal(size=(3,)).astype(np.float32),
    }
    xs = rng.normal(size=(steps, 2, 4)).astype(np.float32)
    dys = rng.normal(size=(steps, 2, 3)).astype(np.float32)
    ir = popxl.Ir()
    ir._pb_ir.getSessionOptions().numIOTiles = 16
    with ir.main_graph, popxl.in_sequence(True):
        h = popxl.h2d_stream((2, 4), popxl.float32, "x")
        d = popxl.d2h_stream((2, 4), popxl.float32, "dx")
        args, graph = MLP().create_graph(h.spec)
        dargs, dgraph = autodiff_with_accumulation(graph, graph.args.tensors, grads_required=graph.graph.inputs[:1])
        dy_in = dgraph.graph.inputs[0]
        dy_buffer = batch_serial_buffer(dy_in, steps=steps, rows=rows)
        for j in range(steps):
            ops.remote_store(dy_buffer, n * steps + j, popxl.constant(dys[j]))
        fwd, grad = batch_serialise_fwd_and_grad(
            graph,
            dgraph,
            graph.args,
            steps,
            load_handles={graph.graph.inputs[0]: h, dy_in: (dy_buffer, 0)},
            store_streams={dgraph.graph.outputs[0]: d},
            store_buffers={},
            rows=rows,
            io_mode=io_mode,
        )
        # The gradient graph's args now start with the forward variables it reads.
        assert list(dgraph.args.to_dict())[:2] == ["fc1.weight", "fc2.weight"]
        weights = args.init()
        grad_vars = dargs.init()
        grad_vars.update(weights)
        fwd.graph.bind(weights).call(n)
        grad.graph.bind(grad_vars).call(n)
    ir.num_host_transfers = steps
    session = popxl.Session(ir, "cpu")
    session.write_variables_data({weights[k]: v for k, v in params.items()})
    with session:
        out = session.run({h: xs if steps > 1 else xs[0]})[d].reshape(steps, 2, 4)
    jparams = {k: jnp.asarray(v) for k, v in params.items()}
    param_grads = []
    for j in range(steps):
        _, pullback = jax.vjp(_mlp_reference, jparams, jnp.asarray(xs[j]))
        g_params, g_x = pullback(jnp.asarray(dys[j]))
        np.testing.assert_allclose(out[j], g_x, rtol=1e-5, atol=1e-5)
        param_grads.append(g_params)
    for name in params:
        mean = np.mean([np.asarray(g[name]) for g in param_grads], 0)
        np.testing.assert_allclose(session.get_tensor_data(grad_vars.accum[name]), mean, rtol=1e-5, atol=1e-5)


def test_fwd_and_grad_validation() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((2, 4), popxl.float32, "x")
        _, graph = MLP().create_graph(h.spec)
        _, dgraph = autodiff_with_accumulation(graph, graph.args.tensors, grads_required=graph.graph.inputs[:1])
        with pytest.raises(ValueError, match=r"FwdGrad input \(idx=0\)"):
            batch_serialise_fwd_and_grad(
                graph, dgraph, graph.args, 2, {graph.graph.inputs[0]: h}, {}, {}, io_mode="compute"
            )
        # Forward variables not named for the gradient graph are stored per step like activations.
        _, graph2 = MLP().create_graph(h.spec)
        _, dgraph2 = autodiff_with_accumulation(graph2, graph2.args.tensors, grads_required=graph2.graph.inputs[:1])
        dy = popxl.h2d_stream((2, 3), popxl.float32)
        fwd, _ = batch_serialise_fwd_and_grad(
            graph2,
            dgraph2,
            NamedTensors(),
            2,
            {graph2.graph.inputs[0]: h, dgraph2.graph.inputs[0]: dy},
            {},
            {},
            io_mode="compute",
        )
        stored = {t.name for t in fwd.stored_buffers}
        assert {"fc1/weight", "fc2/weight", "x"} <= stored


class ShardedFeedForward(Module):
    """Column-sharded dense layer over a tensor-parallel group, summed back, plus a shared bias."""

    def __init__(self, tp: int, dp: int) -> None:
        super().__init__()
        self.grouping = popxl.gir().replica_grouping(stride=tp, group_size=dp)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("weight", partial(np.zeros, (8, 16)), x.dtype, replica_grouping=self.grouping)
        summed = ops.collectives.replicated_all_reduce(ops.gelu(x @ w), group=self.grouping.transpose())
        b = self.add_variable_input("bias", partial(np.zeros, (16,)), x.dtype)
        return ops.gelu(summed + b)


def _gelu(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.asarray(jax.nn.gelu(jnp.asarray(x), approximate=True))


def _dgelu(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return np.asarray(
        jax.vmap(jax.grad(lambda v: jax.nn.gelu(v, approximate=True)))(jnp.asarray(x).reshape(-1))
    ).reshape(x.shape)


@pytest.mark.parametrize("replica_mode", ["devices", "simulate"])
@pytest.mark.parametrize("io_mode", IO_MODES)
def test_activation_stored_sharded_across_the_tensor_parallel_group(io_mode: str, replica_mode: str) -> None:
    tp, dp, steps = 4, 2, 3
    xs = rng.normal(size=(steps, 8, 3, 8)).astype(np.float32)
    dys = rng.normal(size=(steps, 3, 16)).astype(np.float32)
    w = rng.normal(size=(tp, 8, 16)).astype(np.float32)
    bias = rng.normal(size=(16,)).astype(np.float32)
    ir = popxl.Ir(replication=tp * dp)
    ir._pb_ir.getSessionOptions().numIOTiles = 16
    tp_group = ir.replica_grouping(stride=1, group_size=tp)
    with ir.main_graph, popxl.in_sequence(True):
        h = popxl.h2d_stream((3, 8), popxl.float32, "x")
        d = popxl.d2h_stream((3, 8), popxl.float32, "dx")
        args, graph = ShardedFeedForward(tp, dp).create_graph(h.spec)
        dargs, dgraph = autodiff_with_accumulation(graph, graph.args.tensors, grads_required=graph.graph.inputs[:1])
        activations = [
            ec.fwd_tensor
            for ec in dgraph.grad_graph_info.expected_inputs
            if ec.connection_type is ExpectedConnectionType.Fwd and ec.fwd_tensor not in graph.args.tensors
        ]
        assert [t.name for t in activations] == ["add_out", "matmul_out", "x"]
        dy_in = dgraph.graph.inputs[0]
        dy_buffer = batch_serial_buffer(dy_in, steps=steps, shard_group=tp_group)
        assert dy_buffer.tensor_shape == (12,) and dy_buffer.meta_shape == (3, 16)
        for j in range(steps):
            shard = ops.collectives.replica_sharded_slice(popxl.constant(dys[j]), group=tp_group)
            ops.remote_store(dy_buffer, j, shard)
        fwd, grad = batch_serialise_fwd_and_grad(
            graph,
            dgraph,
            graph.args,
            steps,
            load_handles={graph.graph.inputs[0]: h, dy_in: (dy_buffer, 0, tp_group)},
            store_streams={dgraph.graph.outputs[0]: d},
            store_buffers={activations[0]: tp_group},
            io_mode=io_mode,
        )
        stored = fwd.stored_buffers[activations[0]]
        assert stored.shard_group == tp_group and stored.buffer.meta_shape == (3, 16)
        weights = args.init()
        grad_vars = dargs.init()
        grad_vars.update(weights)
        fwd.graph.bind(weights).call(0)
        grad.graph.bind(grad_vars).call(0)
    ir.num_host_transfers = steps
    apply_pre_alias_patterns(ir)
    with popxl.Session(ir, "cpu", replica_mode=replica_mode) as session:
        session.write_variables_data({weights.weight: w, weights.bias: bias})
        out = session.run({h: xs})[d]
    for j in range(steps):
        for group in ([0, 1, 2, 3], [4, 5, 6, 7]):
            pre = {r: xs[j, r] @ w[r % tp] for r in group}
            z = sum(_gelu(pre[r]) for r in group) + bias
            dz = dys[j] * _dgelu(z)
            for r in group:
                # The all-reduce's gradient is again an all-reduce over the group.
                dh = tp * dz * _dgelu(pre[r])
                np.testing.assert_allclose(out[j, r], dh @ w[r % tp].T, rtol=1e-4, atol=1e-4)
