"""Accumulated gradients reach their variables when the gradient graph runs inside another module.

Phased execution's usual pattern: one module takes a layer's forward and accumulating gradient
variables with `add_variable_inputs` and calls both graphs. The accumulators and the mean counter
must be by-reference inputs of that module too, or the accumulation never reaches the variables.
References are `jax.grad` of the maths written directly.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popxl
from popxl import ops
from popxl_addons.core import (
    IO_MODES,
    GraphWithNamedArgs,
    Module,
    NamedReplicaGrouping,
    NamedVariableFactories,
    autodiff_with_accumulation,
    batch_serialise_fwd_and_grad,
)


class Dense(Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("weight", partial(np.zeros, (x.shape[-1], 3)), x.dtype)
        b = self.add_variable_input("bias", partial(np.zeros, (3,)), x.dtype)
        return ops.gelu(x @ w + b)


def _loss(params: dict[str, Any], x: Any) -> Any:
    """The scalar whose gradient the program accumulates: the sum of the layer's output."""
    return jnp.sum(jax.nn.gelu(x @ params["weight"] + params["bias"], approximate=True))


class FwdAndGrad(Module):
    """Runs a layer's forward and its accumulating gradient graph, taking both graphs' variables."""

    def __init__(
        self,
        args: NamedVariableFactories,
        graph: GraphWithNamedArgs,
        dargs: NamedVariableFactories,
        dgraph: GraphWithNamedArgs,
    ) -> None:
        super().__init__()
        self.args, self.graph, self.dargs, self.dgraph = args, graph, dargs, dgraph

    def build(self, x: popxl.Tensor) -> None:
        weights = self.add_variable_inputs("fwd", self.args)
        accums = self.add_variable_inputs("grad", self.dargs)
        site = self.graph.bind(weights).call_with_info(x)
        dy = popxl.constant(np.ones(site.outputs[0].shape, np.float32))
        self.dgraph.bind(accums).call(dy, args=self.dgraph.grad_graph_info.inputs_dict(site))


def _data(steps: int) -> tuple[dict[str, np.ndarray[Any, Any]], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(5)
    params = {"weight": rng.normal(size=(4, 3)).astype(np.float32), "bias": rng.normal(size=(3,)).astype(np.float32)}
    return params, rng.normal(size=(steps, 2, 4)).astype(np.float32)


def _expected(params: dict[str, np.ndarray[Any, Any]], xs: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any]]:
    grads = [jax.grad(_loss)({k: jnp.asarray(v) for k, v in params.items()}, jnp.asarray(x)) for x in xs]
    return {k: np.mean([np.asarray(g[k]) for g in grads], 0) for k in params}


def test_factories_create_by_reference_inputs() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        _, graph = Dense().create_graph(popxl.TensorSpec((2, 4), popxl.float32))
        dargs, _ = autodiff_with_accumulation(graph, graph.args.tensors)
    assert {k: f.by_ref for k, f in dargs.to_dict().items()} == {
        "mean_accum_counter": True,
        "accum.bias": True,
        "accum.weight": True,
    }


def test_gradients_accumulate_through_a_wrapping_module() -> None:
    steps = 3
    params, xs = _data(steps)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        h = popxl.h2d_stream((2, 4), popxl.float32, "x")
        args, graph = Dense().create_graph(h.spec)
        dargs, dgraph = autodiff_with_accumulation(graph, graph.args.tensors)
        wrapper_args, wrapper = FwdAndGrad(args, graph, dargs, dgraph).create_graph(h.spec)
        variables = wrapper_args.init()
        wrapper.bind(variables).call(ops.host_load(h))
    session = popxl.Session(ir, "cpu")
    session.write_variables_data({variables.fwd[k]: v for k, v in params.items()})
    with session:
        for x in xs:
            session.run({h: x})
        expected = _expected(params, xs)
        for name in params:
            got = session.get_tensor_data(variables.grad.accum[name])
            np.testing.assert_allclose(got, expected[name], rtol=1e-5, atol=1e-6)
        assert session.get_tensor_data(variables.grad.mean_accum_counter) == steps


@pytest.mark.placement
@pytest.mark.parametrize("io_mode", IO_MODES)
def test_batch_serialised_gradients_accumulate_through_a_wrapping_module(io_mode: str) -> None:
    steps = 3
    params, xs = _data(steps)
    ir = popxl.Ir()
    ir.session_options.numIOTiles = 16
    with ir.main_graph, popxl.in_sequence(True):
        h = popxl.h2d_stream((2, 4), popxl.float32, "x")
        args, graph = Dense().create_graph(h.spec)
        dargs, dgraph = autodiff_with_accumulation(graph, graph.args.tensors)
        dy = popxl.h2d_stream((2, 3), popxl.float32, "dy")
        fwd, grad = batch_serialise_fwd_and_grad(
            graph,
            dgraph,
            graph.args,
            steps,
            load_handles={graph.graph.inputs[0]: h, dgraph.graph.inputs[0]: dy},
            store_streams={},
            store_buffers={},
            io_mode=io_mode,
        )

        class Phase(Module):
            def build(self) -> None:
                weights = self.add_variable_inputs("fwd", args)
                grad_vars = self.add_variable_inputs("grad", dargs)
                grad_vars.update(weights)
                fwd.graph.bind(weights).call(0)
                grad.graph.bind(grad_vars).call(0)

        phase_args, phase = Phase().create_graph()
        variables = phase_args.init()
        phase.bind(variables).call()
    ir.num_host_transfers = steps
    session = popxl.Session(ir, "cpu")
    session.write_variables_data({variables.fwd[k]: v for k, v in params.items()})
    with session:
        session.run({h: xs, dy: np.ones((steps, 2, 3), np.float32)})
        expected = _expected(params, xs)
        for name in params:
            got = session.get_tensor_data(variables.grad.accum[name])
            np.testing.assert_allclose(got, expected[name], rtol=1e-5, atol=1e-6)
        assert session.get_tensor_data(variables.grad.mean_accum_counter) == steps


class Inner(Module):
    def __init__(self, grouping: popxl.ReplicaGrouping) -> None:
        super().__init__()
        self.grouping = grouping

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("weight", partial(np.zeros, (4, 4)), x.dtype, replica_grouping=self.grouping)
        return x @ w


class TwoLayers(Module):
    def __init__(self, grouping: popxl.ReplicaGrouping) -> None:
        super().__init__()
        self.inner = Inner(grouping)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        b = self.add_variable_input("bias", partial(np.zeros, (4,)), x.dtype)
        return self.inner(x) + b


def test_nested_replica_groupings_reach_the_accumulators() -> None:
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        grouping = ir.replica_grouping(stride=2, group_size=2)
        _, graph = TwoLayers(grouping).create_graph(popxl.TensorSpec((2, 4), popxl.float32))
        named = NamedReplicaGrouping.from_dict({"inner.weight": grouping, "bias": ir.replica_grouping()})
        dargs, _ = autodiff_with_accumulation(graph, graph.args.tensors, replica_groupings=named)
        by_dict, _ = autodiff_with_accumulation(graph, graph.args.tensors, replica_groupings=named.to_dict())
    for factories in (dargs, by_dict):
        groupings = {k: f.replica_grouping for k, f in factories.to_dict().items()}
        assert groupings["accum.inner.weight"] == grouping
        assert groupings["accum.bias"] == ir.replica_grouping()
