"""batch_serialise_fwd_and_grad with per-activation choices (host, recompute, keep) against jax.vjp."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_fwd_and_grad import MLP, _mlp_reference

import popxl
from popxl import ops
from popxl_addons.core import (
    IO_MODES,
    autodiff_with_accumulation,
    batch_serial_buffer,
    batch_serialise_fwd_and_grad,
)
from popxl_addons.core.transforms.batch_serialisation.policy import serialisable_activations

pytestmark = pytest.mark.placement

POLICIES: dict[str, dict[str, str]] = {
    "host": {},
    "keep": {"fc1/add_out": "keep", "gelu_out": "keep", "x": "keep"},
    "recompute": {"fc1/add_out": "recompute", "gelu_out": "recompute"},
    "mixed": {"fc1/add_out": "keep", "gelu_out": "recompute"},
}


def _run(
    policy: dict[str, str], io_mode: str, steps: int, rows: int, seed: int, activation_memory: str | None = None
) -> None:
    rng = np.random.default_rng(seed)
    params = {
        "fc1.weight": rng.normal(size=(4, 6)).astype(np.float32),
        "fc1.bias": rng.normal(size=(6,)).astype(np.float32),
        "fc2.weight": rng.normal(size=(6, 3)).astype(np.float32),
        "fc2.bias": rng.normal(size=(3,)).astype(np.float32),
    }
    xs = rng.normal(size=(rows, steps, 2, 4)).astype(np.float32)
    dys = rng.normal(size=(rows, steps, 2, 3)).astype(np.float32)
    ir = popxl.Ir()
    ir.session_options.numIOTiles = 16
    with ir.main_graph, popxl.in_sequence(True):
        h = popxl.h2d_stream((2, 4), popxl.float32, "x")
        d = popxl.d2h_stream((2, 4), popxl.float32, "dx")
        args, graph = MLP().create_graph(h.spec)
        dargs, dgraph = autodiff_with_accumulation(graph, graph.args.tensors, grads_required=graph.graph.inputs[:1])
        dy_in = dgraph.graph.inputs[0]
        dy_buffer = batch_serial_buffer(dy_in, steps=steps, rows=rows)
        for n in range(rows):
            for j in range(steps):
                ops.remote_store(dy_buffer, n * steps + j, popxl.constant(dys[n, j]))
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
            policy=policy,
            activation_memory=activation_memory,
        )
        assert all(handle.buffer.memory == activation_memory for handle in fwd.stored_buffers.values())
        kept_names = {k for k, c in policy.items() if c == "keep"}
        assert sorted(fwd.kept.to_dict()) == sorted(f"kept.{k.replace('/', '_')}" for k in kept_names)
        stored = {t.name for t in fwd.stored_buffers}
        expected_stored = (
            {"fc1/add_out", "gelu_out", "x"} - kept_names - {k for k, c in policy.items() if c == "recompute"}
        )
        assert stored == expected_stored
        weights = args.init()
        kept = fwd.kept.init()
        grad_vars = dargs.init()
        grad_vars.update(weights)
        grad_vars.update(kept)
        weights_and_kept = weights.copy()
        weights_and_kept.update(kept)
        for n in range(rows):
            fwd.graph.bind(weights_and_kept).call(n)
            grad.graph.bind(grad_vars).call(n)
    ir.num_host_transfers = steps * rows
    session = popxl.Session(ir, "cpu")
    session.write_variables_data({weights[k]: v for k, v in params.items()})
    with session:
        out = session.run({h: xs.reshape(rows * steps, 2, 4)})[d].reshape(rows, steps, 2, 4)
    jparams = {k: jnp.asarray(v) for k, v in params.items()}
    param_grads = []
    for n in range(rows):
        for j in range(steps):
            _, pullback = jax.vjp(_mlp_reference, jparams, jnp.asarray(xs[n, j]))
            g_params, g_x = pullback(jnp.asarray(dys[n, j]))
            np.testing.assert_allclose(out[n, j], g_x, rtol=1e-5, atol=1e-5)
            param_grads.append(g_params)
    for name in params:
        mean = np.mean([np.asarray(g[name]) for g in param_grads], 0)
        np.testing.assert_allclose(session.get_tensor_data(grad_vars.accum[name]), mean, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("io_mode", IO_MODES)
@pytest.mark.parametrize("policy", list(POLICIES))
def test_each_choice_and_mixes_match_jax(policy: str, io_mode: str) -> None:
    _run(POLICIES[policy], io_mode, steps=3, rows=1, seed=len(policy))


def test_kept_stacks_hold_every_row() -> None:
    # With recomputation the forward input x becomes an activation, kept here too.
    _run(POLICIES["mixed"] | {"x": "keep"}, "io_overlapped", steps=2, rows=2, seed=5)


@pytest.mark.parametrize("memory", ["host", "device"])
def test_activation_buffers_placed_as_asked_give_the_same_numbers(memory: str) -> None:
    _run(POLICIES["mixed"], "io_overlapped", steps=2, rows=1, seed=11, activation_memory=memory)


def test_policy_validation() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((2, 4), popxl.float32, "x")
        dy = popxl.h2d_stream((2, 3), popxl.float32, "dy")
        _, graph = MLP().create_graph(h.spec)
        _, dgraph = autodiff_with_accumulation(graph, graph.args.tensors, grads_required=graph.graph.inputs[:1])
        names = serialisable_activations(dgraph.grad_graph_info, graph.args)
        assert sorted(names) == ["fc1/add_out", "gelu_out", "x"]

        def serialise(policy: Any) -> None:
            batch_serialise_fwd_and_grad(
                graph,
                dgraph,
                graph.args,
                2,
                {graph.graph.inputs[0]: h, dgraph.graph.inputs[0]: dy},
                {},
                {},
                io_mode="compute",
                policy=policy,
            )

        with pytest.raises(ValueError, match=r"'nope', not an activation .*'gelu_out'"):
            serialise({"nope": "keep"})
        with pytest.raises(ValueError, match=r"Unknown choice 'disk' for activation 'gelu_out'"):
            serialise({"gelu_out": "disk"})
        with pytest.raises(ValueError, match=r"'x' is an input of the forward graph"):
            serialise({"x": "recompute"})
        with pytest.raises(ValueError, match=r"activation_memory must be None, 'host' or 'device', got 'disk'"):
            batch_serialise_fwd_and_grad(
                graph, dgraph, graph.args, 2, {graph.graph.inputs[0]: h}, {}, {}, activation_memory="disk"
            )
