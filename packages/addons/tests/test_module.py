"""Module, variable factories and graphs with named args."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl_addons.core import Module, NamedVariableFactories, VariableFactory


class Affine(Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("weight", partial(np.full, (x.shape[-1], 3), 0.5), x.dtype)
        b = self.add_variable_input("bias", partial(np.arange, 3), x.dtype)
        return x @ w + b


class Stack(Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = Affine()
        self.second = Affine()

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        return self.second(ops.relu(self.first(x)))


def test_nested_modules_name_scopes_and_variables() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((2, 3), popxl.float32, "x")
        factories, graph = Stack().create_graph(h.spec)
        assert graph.graph.id == "Stack_subgraph(0)"
        assert [t.name for t in graph.graph.inputs] == [
            "x",
            "first/weight",
            "first/bias",
            "second/weight",
            "second/bias",
        ]
        assert sorted(graph.args.to_dict()) == ["first.bias", "first.weight", "second.bias", "second.weight"]
        variables = factories.init()
        assert [v.name for v in ir.main_graph.variables] == [
            "first.bias",
            "first.weight",
            "second.bias",
            "second.weight",
        ]
        (y,) = graph.bind(variables).call(ops.host_load(h))
        d = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(d, y)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with popxl.Session(ir, "cpu") as s:
        out = s.run({h: x})[d]
    layer = lambda v: v @ np.full((3, 3), 0.5, np.float32) + np.arange(3)  # noqa: E731
    np.testing.assert_allclose(out, layer(np.maximum(layer(x), 0)))


def test_module_builds_several_graphs_and_inlines() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        m = Affine()
        f1, g1 = m.create_graph(popxl.TensorSpec((2, 3), popxl.float32))
        f2, g2 = m.create_graph(popxl.TensorSpec((4, 5), popxl.float32))
        assert g1.graph is not g2.graph and g2.args.weight.shape == (5, 3)
        assert f1.weight.shape == (3, 3) and f2.weight.shape == (5, 3)
        outer = ir.create_empty_graph("outer")
        with outer:
            x = popxl.graph_input((2, 3), popxl.float32, "x")
            y = m(x)
        assert y.graph is outer and not any(op.name == "call" for op in outer.ops)
        assert [t.name for t in outer.inputs] == ["x", "weight", "bias"]
    with pytest.raises(AttributeError, match="grad_graph_info"):
        _ = g1.grad_graph_info


def test_variable_factory_sources_dtypes_groupings_and_errors() -> None:
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        draws = iter([np.ones(2), np.full(2, 2.0), np.full(2, 3.0)])
        grouping = ir.replica_grouping(1, 2)
        vf = VariableFactory(draws, popxl.float32, "v", replica_grouping=grouping)
        v = vf.create_tensor()
        assert v.shape_on_host == (2, 2) and v.dtype is popxl.float32
        np.testing.assert_array_equal(v.host_data, [[1, 1], [2, 2]])
        counter = iter(range(10))
        vf2 = VariableFactory(lambda: np.int32(next(counter)))
        # The callable is called once per variable: the first call, made here for the shape, is kept.
        assert [int(vf2.create_tensor().host_data) for _ in range(2)] == [0, 1]
        sharded = VariableFactory(partial(np.zeros, (4, 2)), shard_over=4)
        assert sharded.shape == (2,) and sharded.meta_shape == (4, 2)
        with pytest.raises(ValueError, match="throws error"):
            VariableFactory(lambda: 1 / 0)
        with pytest.raises(ValueError, match="callable or an iterable"):
            VariableFactory(3)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="arrays or scalars"):
            VariableFactory(lambda: "text")
        with pytest.raises(AssertionError):
            VariableFactory(partial(np.zeros, 4), shard_over=8)
        named = NamedVariableFactories.from_dict({"z": vf, "a.b": vf})
        assert named.keys_flat() == ["z", "a.b"]


def test_graph_autodiff_method_guards_against_a_second_application() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        _, graph = Affine().create_graph(popxl.TensorSpec((2, 3), popxl.float32))
        grad = graph.autodiff(grads_required=graph.graph.inputs[:1])
        assert grad.grad_graph_info.forward_graph is graph.graph
        assert [ec.fwd_tensor for ec in grad.grad_graph_info.expected_outputs] == [graph.graph.inputs[0]]
        with pytest.raises(RuntimeError, match="already been applied"):
            graph.autodiff()
        with pytest.raises(ValueError, match="needs `build_grad` implemented"):
            graph.autodiff(method="build_grad", force=True)
        with pytest.raises(ValueError, match="`method` should be one of"):
            graph.autodiff(method="magic", force=True)
        graph.autodiff(grads_required=graph.graph.inputs[:1], force=True)
