"""Module features: user-defined gradients, outlined sub-modules, module lists, graph caching and recomputation."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl_addons.core import (
    GraphCache,
    Module,
    VariableFactory,
    autodiff,
    autodiff_with_accumulation,
    recompute_graph,
)

RNG = np.random.default_rng(5)
X = RNG.normal(size=(4, 3)).astype(np.float32)
DY = RNG.normal(size=(4, 2)).astype(np.float32)
W = RNG.normal(size=(3, 2)).astype(np.float32)


class HandLinear(Module):
    """x @ w + b with its gradient written by hand (the weight gradient doubled, to tell it from autodiff's)."""

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("w", lambda: W, popxl.float32)
        b = self.add_variable_input("b", partial(np.zeros, (2,)), popxl.float32)
        self.aux["x"] = x
        self.aux["w"] = w
        return x @ w + b

    def build_grad(self, dy: popxl.Tensor) -> popxl.Tensor:
        self.var_grad["w"] = (self.aux["x"].T @ dy) * 2.0
        self.var_grad["b"] = ops.sum(dy, 0)
        return dy @ self.aux["w"].T


class Outer(Module):
    """Calls HandLinear as its own graph, then a tanh."""

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        (y,) = self.call_module(HandLinear(), name="inner")(x)
        return ops.tanh(y)


def _run(ir: popxl.Ir, outputs: dict[str, popxl.Tensor]) -> dict[str, Any]:
    with ir.main_graph:
        streams = {k: popxl.d2h_stream(t.shape, t.dtype, k) for k, t in outputs.items()}
        for k, t in outputs.items():
            ops.host_store(streams[k], t)
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    return {k: out[s] for k, s in streams.items()}


def test_build_grad_defines_the_gradient_and_stitches_aux_outputs() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x, dy = popxl.variable(X, name="x"), popxl.variable(DY, name="dy")
        facts, fwd = HandLinear().create_graph(x)
        grad = fwd.autodiff()
        assert fwd.graph.recursive_autodiff is False
        assert len(fwd.graph.outputs) == 3  # y, then the aux tensors x and w
        site = fwd.bind(facts.init()).call_with_info(x)
        dx, dw, db = grad.call(dy, args=grad.grad_graph_info.inputs_dict(site))
    out = _run(ir, {"dx": dx, "dw": dw, "db": db})
    np.testing.assert_allclose(out["dx"], DY @ W.T, rtol=1e-5)
    np.testing.assert_allclose(out["dw"], 2 * X.T @ DY, rtol=1e-5)
    np.testing.assert_allclose(out["db"], DY.sum(0), rtol=1e-5)


def test_build_grad_is_validated() -> None:
    class Missing(HandLinear):
        def build_grad(self, dy: popxl.Tensor) -> popxl.Tensor:
            self.var_grad["b"] = ops.sum(dy, 0)
            return dy @ self.aux["w"].T

    class WrongShape(HandLinear):
        def build_grad(self, dy: popxl.Tensor) -> popxl.Tensor:
            self.var_grad["w"] = self.aux["x"].T @ dy
            self.var_grad["b"] = ops.sum(dy, 0)
            return dy

    ir = popxl.Ir()
    with ir.main_graph:
        spec = popxl.TensorSpec((4, 3), popxl.float32)
        _, fwd = Missing().create_graph(spec)
        with pytest.raises(RuntimeError, match="Variables missing gradients: \\['w'\\]"):
            fwd.autodiff()
        _, fwd = WrongShape().create_graph(spec)
        with pytest.raises(ValueError, match="position 0"):
            fwd.autodiff()
        _, fwd = HandLinear().create_graph(spec)
        with pytest.raises(ValueError, match="not a output of `fwd_graph`"):
            fwd.autodiff(grads_provided=[fwd.graph.inputs[0]])
        with pytest.raises(RuntimeError, match="`build_grad` has been implemented"):
            HandLinear()(popxl.variable(X))
        with pytest.raises(RuntimeError, match="get items within"):
            _ = HandLinear().aux["x"]


def test_call_module_outlines_and_its_gradient_is_used_by_the_callers_autodiff() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x, dy = popxl.variable(X, name="x"), popxl.variable(DY, name="dy")
        facts, fwd = Outer().create_graph(x)
        assert sorted(facts.keys_flat()) == ["inner.b", "inner.w"]
        assert len(fwd.called_graphs_grad_info) == 1
        bare = fwd.copy()
        bare.called_graphs_grad_info = {}
        with pytest.raises(RuntimeError, match="marked as unsafe to autodiff"):
            bare.autodiff()
        grad = fwd.autodiff(force=True)
        site = fwd.bind(facts.init()).call_with_info(x)
        dx, dw, _ = grad.call(dy, args=grad.grad_graph_info.inputs_dict(site))
    y = np.tanh(X @ W)
    dz = DY * (1 - y**2)
    out = _run(ir, {"dx": dx, "dw": dw})
    np.testing.assert_allclose(out["dx"], dz @ W.T, rtol=1e-5, atol=1e-6)
    # The inner module's own rule (which doubles the weight gradient) is used, not autodiff of its graph.
    np.testing.assert_allclose(out["dw"], 2 * X.T @ dz, rtol=1e-5, atol=1e-6)


class Chain(Module):
    """Three linear maps from a module list, then three sharing one outlined graph."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = Module.from_list([Scaled(i + 1.0) for i in range(3)])

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        for layer in self.layers:
            x = layer(x)
        factories, graph = Scaled(1.0).create_graph(x)
        for i in range(3):
            (x,) = graph.bind(self.add_variable_inputs(f"shared{i}", factories)).call(x)
        return x


class Scaled(Module):
    def __init__(self, start: float) -> None:
        super().__init__()
        self.start = start

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        return x * self.add_variable_input("s", partial(np.full, x.shape[-1:], self.start), x.dtype)


def test_module_lists_and_added_variable_inputs_name_every_variable() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, name="x")
        facts, fwd = Chain().create_graph(x)
        names = sorted(facts.keys_flat())
        (y,) = fwd.bind(facts.init()).call(x)
    assert names == ["layers.0.s", "layers.1.s", "layers.2.s", "shared0.s", "shared1.s", "shared2.s"]
    assert all(fwd.args.layers[i].s in fwd.graph for i in range(3))
    np.testing.assert_allclose(_run(ir, {"y": y})["y"], X * 6.0, rtol=1e-6)


def test_graph_cache_reuses_graphs_for_compatible_arguments() -> None:
    def add(x: popxl.Tensor, y: popxl.Tensor) -> popxl.Tensor:
        return x + y

    cache = GraphCache()
    ir = popxl.Ir()
    with ir.main_graph:
        a, b = popxl.variable(np.ones(3, np.float32)), popxl.variable(np.ones(3, np.float32))
        c = popxl.variable(np.ones(4, np.float32))
        first = cache.create_graph(add, a, b)
        assert cache.create_graph(add, b, a) is first
        assert cache.create_graph(add, c, c) is not first
        with popxl.ipu(1):
            assert cache.create_graph(add, a, b) is not first


class CachedScaled(Module):
    def __init__(self) -> None:
        super().__init__(cache=True)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        return x * self.add_variable_input("s", partial(np.full, x.shape[-1:], 2.0), x.dtype)


def test_a_caching_module_returns_one_graph_and_its_factories_each_time() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        module = CachedScaled()
        spec = popxl.TensorSpec((2, 3), popxl.float32)
        facts1, g1 = module.create_graph(spec)
        facts2, g2 = module.create_graph(spec)
        _, g3 = module.create_graph(popxl.TensorSpec((2, 4), popxl.float32))
    assert g1.graph is g2.graph and g3.graph is not g1.graph
    assert facts1.keys_flat() == facts2.keys_flat() == ["s"]
    with pytest.raises(ValueError, match="caching"):
        HandLinear(cache=True)


def test_recompute_graph_recomputes_activations_from_inputs() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x, dy = popxl.variable(X, name="x"), popxl.variable(DY, name="dy")
        w = popxl.variable(W, name="w")
        graph = ir.create_graph(lambda x, w: ops.tanh(x @ w), x, w)
        from popxl_addons.core import GraphWithNamedArgs

        fwd = GraphWithNamedArgs(graph)
        accums, grad = autodiff_with_accumulation(fwd, [fwd.graph.inputs[1]], grads_required=fwd.graph.inputs[:1])
        recomputing = recompute_graph(grad)
        kinds = [ec.connection_type.name for ec in recomputing.grad_graph_info.expected_inputs]
        assert kinds[0] == "FwdGrad" and set(kinds[1:3]) == {"Fwd"}
        site = fwd.call_with_info(x, w)
        accum = accums.init()
        (dx,) = recomputing.bind(accum).call(dy, args=recomputing.grad_graph_info.inputs_dict(site))
        plain = autodiff(ir.create_graph(lambda x, w: ops.tanh(x @ w), x, w))
        assert plain.grad_graph_info is not None
    (accumulated,) = accum.accum.values_flat()
    out = _run(ir, {"dx": dx, "dw": accumulated})
    y = np.tanh(X @ W)
    np.testing.assert_allclose(out["dx"], (DY * (1 - y**2)) @ W.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["dw"], X.T @ (DY * (1 - y**2)), rtol=1e-5, atol=1e-6)


def test_add_variable_factory_and_from_variable_factories() -> None:
    ir = popxl.Ir()
    with ir.main_graph:

        class Product(Module):
            def build(self, x: popxl.Tensor) -> popxl.Tensor:
                self.weights = Module.from_variable_factories(
                    [VariableFactory(partial(np.full, (3,), 2.0), popxl.float32) for _ in range(2)]
                )
                return x * self.weights[0] * self.weights[1]

        x = popxl.variable(np.ones((2, 3), np.float32))
        facts, fwd = Product().create_graph(x)
        (y,) = fwd.bind(facts.init()).call(x)
    assert sorted(facts.keys_flat()) == ["weights.0", "weights.1"]
    np.testing.assert_array_equal(_run(ir, {"y": y})["y"], np.full((2, 3), 4.0, np.float32))
