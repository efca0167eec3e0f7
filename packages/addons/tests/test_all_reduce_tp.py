"""Tensor-parallel all-reduces: forward and gradient for every grouping, the op-to-identity
contract, FeedForwardTP's expected inputs, and a 4-way tensor-parallel MLP against the unsharded one."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.transforms import ExpectedConnectionType, autodiff
from popxl_addons.collectives import (
    PatternNotAppliedError,
    replicated_all_reduce,
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from popxl_addons.core import Module, apply_pre_alias_patterns, autodiff_with_accumulation

rng = np.random.default_rng(8)
FUNCTIONS: dict[str, tuple[Callable[..., popxl.Tensor], bool, bool]] = {
    # name: (function, forward reduces, gradient reduces)
    "identical_inputs": (replicated_all_reduce_identical_inputs, False, True),
    "identical_grad_inputs": (replicated_all_reduce_identical_grad_inputs, True, False),
    "all_reduce": (replicated_all_reduce, True, True),
}


def _groupings(n: int) -> list[tuple[int, int]]:
    return [(s, g) for s in range(1, n + 1) for g in range(1, n + 1) if n % (s * g) == 0 and (g > 1 or s == 1)]


def _members(r: int, n: int, stride: int, size: int) -> list[int]:
    base = (r // (stride * size)) * stride * size + r % stride
    return [base + k * stride for k in range(size)]


@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("n", [2, 4, 8])
def test_forward_and_gradient_for_every_grouping(name: str, n: int) -> None:
    fn, fwd_reduces, grad_reduces = FUNCTIONS[name]
    x = rng.normal(size=(n, 3)).astype(np.float32)
    dy = rng.normal(size=(n, 3)).astype(np.float32)
    for stride, size in _groupings(n):
        ir = popxl.Ir(replication=n)
        with ir.main_graph:
            group = ir.replica_grouping(stride, size)
            h = popxl.h2d_stream((3,), popxl.float32, "x")
            hd = popxl.h2d_stream((3,), popxl.float32, "dy")
            graph = ir.create_graph(lambda t, group=group: fn(t, group=group), h.spec)
            info = autodiff(graph)
            apply_pre_alias_patterns(ir)
            site = ops.call_with_info(graph, ops.host_load(h))
            (dx,) = ops.call(info.graph, ops.host_load(hd), inputs_dict=info.inputs_dict(site))
            dy_out, dx_out = popxl.d2h_stream((3,), popxl.float32, "y"), popxl.d2h_stream((3,), popxl.float32, "dx")
            ops.host_store(dy_out, site.outputs[0])
            ops.host_store(dx_out, dx)
        with popxl.Session(ir, "cpu") as s:
            out = s.run({h: x, hd: dy})
        for r in range(n):
            m = _members(r, n, stride, size)
            np.testing.assert_allclose(
                out[dy_out][r], x[m].sum(0) if fwd_reduces else x[r], rtol=1e-5, err_msg=f"{stride},{size}"
            )
            np.testing.assert_allclose(
                out[dx_out][r], dy[m].sum(0) if grad_reduces else dy[r], rtol=1e-5, err_msg=f"{stride},{size}"
            )


def test_unrewritten_identical_inputs_op_is_refused_by_the_session() -> None:
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        y = replicated_all_reduce_identical_inputs(popxl.constant(np.ones(2, np.float32)))
        ops.host_store(popxl.d2h_stream((2,), popxl.float32, "y"), y)
        with pytest.raises(ValueError, match=r"supports only op in \('add',\)"):
            replicated_all_reduce_identical_inputs(y, op="max")
        with pytest.raises(ValueError, match="Unknown collective op"):
            replicated_all_reduce(y, op="median")
    with pytest.raises(PatternNotAppliedError, match="apply_pre_alias_patterns"):
        popxl.Session(ir, "cpu")
    apply_pre_alias_patterns(ir, level="minimal")
    with pytest.raises(PatternNotAppliedError):
        popxl.Session(ir, "cpu")
    with pytest.raises(ValueError, match="Unknown pattern level"):
        apply_pre_alias_patterns(ir, level="everything")
    apply_pre_alias_patterns(ir, level="default")
    popxl.Session(ir, "cpu")


def test_accumulating_autodiff_rewrites_its_gradient_graphs() -> None:
    class F(Module):
        def build(self, x: popxl.Tensor) -> popxl.Tensor:
            return replicated_all_reduce_identical_grad_inputs(x * 2.0)

    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        _, graph = F().create_graph(popxl.TensorSpec((2,), popxl.float32))
        _, dgraph = autodiff_with_accumulation(graph, [], grads_required=graph.graph.inputs)
    kinds = [op.name for op in dgraph.graph.ops]
    assert "replicated_all_reduce_TP" not in kinds and "identity" in kinds
    assert any(op.replaced_by_identity for op in dgraph.graph.ops)


class Dense(Module):
    def __init__(self, out: int, grouping: popxl.ReplicaGrouping | None = None, bias: bool = True) -> None:
        super().__init__()
        self.out, self.grouping, self.bias = out, grouping, bias

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input(
            "weight", partial(np.zeros, (x.shape[-1], self.out)), x.dtype, replica_grouping=self.grouping
        )
        y = x @ w
        if self.bias:
            y = y + self.add_variable_input(
                "bias", partial(np.zeros, (self.out,)), x.dtype, replica_grouping=self.grouping
            )
        return y


class FeedForwardTP(Module):
    def __init__(self, tp: int, dp: int, hidden: int) -> None:
        super().__init__()
        self.grouping = popxl.gir().replica_grouping(stride=tp, group_size=dp)
        self.fc1 = Dense(hidden // tp, self.grouping)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        z = replicated_all_reduce_identical_inputs(x, group=self.grouping.transpose())
        z = ops.gelu(self.fc1(z))
        z = replicated_all_reduce_identical_grad_inputs(z, group=self.grouping.transpose())
        bias = self.add_variable_input("bias", lambda: np.zeros(z.shape[-1]), z.dtype)
        return ops.gelu(z + bias)


def test_feed_forward_tp_expected_inputs_follow_popxl_order() -> None:
    ir = popxl.Ir(replication=8)
    with ir.main_graph:
        _, graph = FeedForwardTP(4, 2, 64).create_graph(popxl.TensorSpec((3, 8), popxl.float32))
        _, dgraph = autodiff_with_accumulation(graph, graph.args.tensors, grads_required=graph.graph.inputs[:1])
    expected = [(ec.connection_type, ec.fwd_tensor.name) for ec in dgraph.grad_graph_info.expected_inputs]
    last_gelu = graph.graph.outputs[0].name
    assert last_gelu.startswith("gelu_out__t")
    assert expected == [
        (ExpectedConnectionType.FwdGrad, last_gelu),
        (ExpectedConnectionType.Fwd, "add_out"),
        (ExpectedConnectionType.Fwd, "fc1/add_out"),
        (ExpectedConnectionType.Fwd, "fc1/weight"),
        (ExpectedConnectionType.Fwd, "replicated_all_reduce_TP_out"),
    ]
    assert [t.name for t in graph.graph.outputs] == [
        last_gelu,
        "add_out",
        "fc1/add_out",
        "replicated_all_reduce_TP_out",
    ]


class MLP(Module):
    """fc1 column-sharded and fc2 row-sharded over `tp` replicas (Megatron-LM's f and g)."""

    def __init__(self, tp: int, hidden: int) -> None:
        super().__init__()
        self.tp = tp
        self.grouping = popxl.gir().replica_grouping(stride=1, group_size=1) if tp > 1 else None
        self.fc1 = Dense(hidden // tp, self.grouping)
        self.fc2 = Dense(4, self.grouping, bias=False)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        if self.tp > 1:
            x = replicated_all_reduce_identical_inputs(x)
        y = self.fc2(ops.gelu(self.fc1(x)))
        return replicated_all_reduce_identical_grad_inputs(y) if self.tp > 1 else y


def _run_mlp(
    tp: int, params: dict[str, np.ndarray[Any, Any]], x: np.ndarray[Any, Any], dy: np.ndarray[Any, Any]
) -> tuple[Any, Any, dict[str, Any]]:
    ir = popxl.Ir(replication=tp)
    with ir.main_graph, popxl.in_sequence():
        h = popxl.h2d_stream(x.shape, popxl.float32, "x")
        mlp = MLP(tp, 8)
        args, graph = mlp.create_graph(h.spec)
        # Each replica accumulates the gradients of its own shards.
        groupings = {k: mlp.grouping for k in params} if mlp.grouping is not None else None
        dargs, dgraph = autodiff_with_accumulation(
            graph, graph.args.tensors, grads_required=graph.graph.inputs[:1], replica_groupings=groupings
        )
        variables, accums = args.init(), dargs.init()
        site = graph.bind(variables).call_with_info(ops.host_load(h))
        (dx,) = dgraph.bind(accums).call(popxl.constant(dy), args=dgraph.grad_graph_info.inputs_dict(site))
        sy, sdx = popxl.d2h_stream(dy.shape, popxl.float32, "y"), popxl.d2h_stream(x.shape, popxl.float32, "dx")
        ops.host_store(sy, site.outputs[0])
        ops.host_store(sdx, dx)
    apply_pre_alias_patterns(ir)
    s = popxl.Session(ir, "cpu")
    s.write_variables_data({variables[k]: v for k, v in params.items()})
    with s:
        out = s.run({h: np.broadcast_to(x, (tp, *x.shape)) if tp > 1 else x})
    grads = {k: s.get_tensor_data(accums.accum[k]) for k in params}
    return out[sy], out[sdx], grads


def test_tensor_parallel_mlp_equals_the_unsharded_mlp() -> None:
    tp = 4
    x = rng.normal(size=(5, 4)).astype(np.float32)
    dy = rng.normal(size=(5, 4)).astype(np.float32)
    w1 = rng.normal(size=(4, 8)).astype(np.float32)
    b1 = rng.normal(size=(8,)).astype(np.float32)
    w2 = rng.normal(size=(8, 4)).astype(np.float32)
    y, dx, grads = _run_mlp(1, {"fc1.weight": w1, "fc1.bias": b1, "fc2.weight": w2}, x, dy)
    sharded = {
        "fc1.weight": np.stack(np.split(w1, tp, axis=1)),
        "fc1.bias": np.stack(np.split(b1, tp)),
        "fc2.weight": np.stack(np.split(w2, tp, axis=0)),
    }
    y_tp, dx_tp, grads_tp = _run_mlp(tp, sharded, x, dy)

    def ref(x: Any, w1: Any, b1: Any, w2: Any) -> Any:
        return jax.nn.gelu(x @ w1 + b1, approximate=True) @ w2

    y_ref, pullback = jax.vjp(ref, x, w1, b1, w2)
    gx, gw1, gb1, gw2 = pullback(jnp.asarray(dy))
    np.testing.assert_allclose(y, y_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, gx, rtol=1e-4, atol=1e-5)
    for r in range(tp):
        np.testing.assert_allclose(y_tp[r], y_ref, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(dx_tp[r], gx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.concatenate(list(grads_tp["fc1.weight"]), axis=1), gw1, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.concatenate(list(grads_tp["fc1.bias"])), gb1, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.concatenate(list(grads_tp["fc2.weight"]), axis=0), gw2, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads["fc1.weight"], gw1, rtol=1e-4, atol=1e-5)
