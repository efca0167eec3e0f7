"""pipelined_execution: stages run over the steps' micro-batches, with popxl-addons' results.

Every numerical check is against the same model written directly in JAX (`jax.grad` per
micro-batch, the running means of the accumulators, one SGD step after the pipeline).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popxl
from popxl import ipu_only, ops
from popxl_addons.core import Module, autodiff_with_accumulation, host_load, pipelined_execution
from popxl_addons.transforms.pipelining import pipelined_execution as thin_pipelined_execution

LR = 0.5


class Tanh(Module):
    """tanh(x @ w) with `w` given."""

    def __init__(self, w: np.ndarray[Any, Any]) -> None:
        super().__init__()
        self.w = w

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("weight", lambda: self.w.copy(), x.dtype)
        return ops.tanh(x @ w)


def _layer(w: jax.Array, x: jax.Array) -> jax.Array:
    return jnp.tanh(x @ w)


def _reference(
    loss: Callable[..., jax.Array], ws: list[np.ndarray[Any, Any]], data: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], list[np.ndarray[Any, Any]], list[np.ndarray[Any, Any]]]:
    """Per-step losses, the mean gradients over the steps, and the weights after one SGD step, in float32."""
    ws32 = [jnp.asarray(w, jnp.float32) for w in ws]
    xs = jnp.asarray(data, jnp.float32)
    losses = np.array([loss(*ws32, x) for x in xs])
    grads = [np.mean([jax.grad(loss, argnums=i)(*ws32, x) for x in xs], axis=0) for i in range(len(ws))]
    return losses, grads, [np.asarray(w) - LR * g for w, g in zip(ws32, grads)]


def _data(steps: int, dtype: Any) -> tuple[np.ndarray[Any, Any], list[np.ndarray[Any, Any]]]:
    rng = np.random.default_rng(0)
    data = rng.normal(0, 1, (steps, 2, 4)).astype(dtype)
    ws = [rng.normal(0, 0.5, (4, 4)).astype(dtype) for _ in range(2)]
    return data, ws


def _sgd(weight: popxl.Tensor, accum: popxl.Tensor) -> None:
    ops.var_updates.accumulate_(weight, accum, -LR)


def _assert_close(actual: Any, expected: Any, dtype: Any) -> None:
    actual = np.asarray(actual, np.float32)
    assert np.all(np.isfinite(actual))
    if dtype == np.float16:
        # float16 rounding of each op, against float32 maths: within 1% of the magnitude.
        np.testing.assert_allclose(actual, expected, atol=1e-2 * float(np.max(np.abs(expected))))
    else:
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


def test_thin_path_is_core() -> None:
    assert thin_pipelined_execution is pipelined_execution


def test_two_stages_accumulate_gradients_over_the_steps() -> None:
    """Stage 0 (IPU 0): load and forward; stage 1 (IPU 1): loss, and the gradient from stashed activations."""
    steps = 4
    data, (w1, _) = _data(steps, np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        with pipelined_execution(steps) as p:
            with p.stage(0), popxl.ipu(0):
                _, x_stream, x = host_load(data[0], popxl.float32, "x")
                factories, graph = Tanh(w1).create_graph(x)
                dfactories, dgraph = autodiff_with_accumulation(graph, [graph.args.weight])
                layer, dlayer = factories.init(), dfactories.init()
                info = graph.bind(layer).call_with_info(x)
                y = info.outputs[0].copy_to_ipu(1)
            with p.stage(1), popxl.ipu(1):
                loss_stream = popxl.d2h_stream((), popxl.float32, "loss")
                ops.host_store(loss_stream, ops.sum(y * y))
                dgraph.bind(dlayer).call(y * 2, args=p.stash_and_restore_activations(info, dgraph.grad_graph_info))
        _sgd(layer.weight, dlayer.accum.weight)
    ir.num_host_transfers = steps
    with popxl.Session(ir, "cpu") as session:
        losses = session.run({x_stream: data})[loss_stream]
    accum, weight = session.get_tensor_data(dlayer.accum.weight), session.get_tensor_data(layer.weight)

    ref_losses, (ref_grad,), (ref_weight,) = _reference(lambda w, x: jnp.sum(_layer(w, x) ** 2), [w1], data)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    np.testing.assert_allclose(accum, ref_grad, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weight, ref_weight, rtol=1e-5, atol=1e-6)


def _three_stages(dtype: Any, steps: int = 6) -> dict[str, Any]:
    """Stage 0 (IPU 0): load, layer 1; stage 1 (IPU 1): layer 2, loss, its gradient; stage 2 (IPU 0): layer 1's
    gradient from activations stashed in stage 0. Then an SGD step on both weights, outside the pipeline."""
    data, (w1, w2) = _data(steps, dtype)
    pdt = popxl.float16 if dtype == np.float16 else popxl.float32
    ir = popxl.Ir()
    with ir.main_graph:
        with pipelined_execution(steps) as p:
            with p.stage(0), popxl.ipu(0):
                _, x_stream, x = host_load(data[0], pdt, "x")
                f1, g1 = Tanh(w1).create_graph(x)
                df1, dg1 = autodiff_with_accumulation(g1, [g1.args.weight])
                l1, dl1 = f1.init("l1"), df1.init("dl1")
                info1 = g1.bind(l1).call_with_info(x)
                h = ops.ipu_copy(info1.outputs[0], 1, source=0)
            with p.stage(1), popxl.ipu(1):
                f2, g2 = Tanh(w2).create_graph(h)
                df2, dg2 = autodiff_with_accumulation(g2, [g2.args.weight], grads_required=[g2.graph.inputs[0]])
                l2, dl2 = f2.init("l2"), df2.init("dl2")
                info2 = g2.bind(l2).call_with_info(h)
                y = info2.outputs[0]
                loss_stream = popxl.d2h_stream((), pdt, "loss")
                ops.host_store(loss_stream, ops.sum(y * y))
                # Same stage: the activations pass as they are.
                acts2 = p.stash_and_restore_activations(info2, dg2.grad_graph_info)
                (dh,) = dg2.bind(dl2).call(y * 2, args=acts2)
                dh = dh.copy_to_ipu(0)
            with p.stage(2), popxl.ipu(0):
                dg1.bind(dl1).call(dh, args=p.stash_and_restore_activations(info1, dg1.grad_graph_info))
        _sgd(l1.weight, dl1.accum.weight)
        _sgd(l2.weight, dl2.accum.weight)
    ir.num_host_transfers = steps
    with popxl.Session(ir, "cpu") as session:
        losses = session.run({x_stream: data})[loss_stream]
    got = {
        "losses": losses,
        "grads": [session.get_tensor_data(dl1.accum.weight), session.get_tensor_data(dl2.accum.weight)],
        "weights": [session.get_tensor_data(l1.weight), session.get_tensor_data(l2.weight)],
        "ir": ir,
        "stages": p,
    }

    def loss(a: jax.Array, b: jax.Array, x: jax.Array) -> jax.Array:
        return jnp.sum(_layer(b, _layer(a, x)) ** 2)

    got["expected"] = _reference(loss, [w1, w2], data)
    return got


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_three_stages_match_jax(dtype: Any) -> None:
    got = _three_stages(dtype)
    ref_losses, ref_grads, ref_weights = got["expected"]
    _assert_close(got["losses"], ref_losses, dtype)
    for grad, ref in zip(got["grads"], ref_grads):
        assert grad.dtype == dtype
        _assert_close(grad, ref, dtype)
    for weight, ref in zip(got["weights"], ref_weights):
        _assert_close(weight, ref, dtype)


def test_stages_run_in_one_loop_with_their_placement_recorded() -> None:
    got = _three_stages(np.float32)
    ir = got["ir"]
    loop = next(op for op in ir.main_graph.ops if op.name == "repeat")
    assert loop.attrs["count"] == 6
    body = loop.attrs["graph"]
    assert body.name.startswith("pipeline_graph")
    # The stages' ops, stage by stage, each stage's in creation order, each keeping its popxl.ipu.
    stages = got["stages"]
    expected = [op for stage in sorted(stages.ops) for op in stages.ops[stage]]
    assert sorted(stages.ops) == [0, 1, 2]
    assert [op.name for op in body.ops] == [op.name for op in expected]
    assert [op.placement.ipu for op in body.ops] == [op.placement.ipu for op in expected]
    assert {op.placement.ipu for op in stages.ops[1] if op.name != "identity"} == {1}
    first_one = [op.placement.ipu for op in body.ops].index(1)
    loads = [op for op in body.ops if op.name == "host_load"]
    assert len(loads) == 1 and body.ops.index(loads[0]) < first_one
    # The source IPU given to ipu_copy stays recorded on the moved copy.
    sources = [ipu_only.recorded(op).get("source_ipu") for op in body.ops]
    assert sorted(sources, key=str) == [0, *[None] * (len(sources) - 1)]


def test_stash_of_a_scalar_restores_its_shape() -> None:
    steps = 4
    ir = popxl.Ir()
    with ir.main_graph, pipelined_execution(steps) as p:
        with p.stage(0):
            _, x_stream, x = host_load(np.zeros((), np.float32), popxl.float32, "x")
            x = x * 3
        with p.stage(1):
            restored = p.stash_and_restore_tensor(x)
            assert restored.shape == ()
            out = popxl.d2h_stream((), popxl.float32, "out")
            ops.host_store(out, restored + 1)
    ir.num_host_transfers = steps
    data = np.arange(steps, dtype=np.float32)
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run({x_stream: data})[out], data * 3 + 1)


def _pipeline(steps: int, build: Callable[[Any], None]) -> None:
    ir = popxl.Ir()
    with ir.main_graph, pipelined_execution(steps) as p:
        build(p)


def test_op_outside_a_stage_is_refused() -> None:
    def build(p: Any) -> None:
        popxl.constant(1.0) + 1

    with pytest.raises(RuntimeError, match="must be created in a stage context"):
        _pipeline(4, build)


def test_too_few_steps_are_refused() -> None:
    def build(p: Any) -> None:
        with p.stage(0):
            x = popxl.constant(1.0) + 1
        with p.stage(1):
            x + 1

    with pytest.raises(ValueError, match="steps=3 stages=2"):
        _pipeline(3, build)


@pytest.mark.parametrize("steps", [0, -1, 2.0, True])
def test_bad_steps_are_refused(steps: Any) -> None:
    with pytest.raises(ValueError, match="positive number of steps"):
        _pipeline(steps, lambda p: None)


def test_a_tensor_of_a_later_stage_is_refused() -> None:
    def build(p: Any) -> None:
        with p.stage(1):
            x = popxl.constant(1.0) + 1
        with p.stage(0):
            x + 1

    with pytest.raises(ValueError, match=r"of pipeline stage 0 reads .* later stage 1"):
        _pipeline(4, build)


def test_state_shared_between_stages_is_refused() -> None:
    """A variable one stage updates and another reads would see the pipeline's schedule."""

    def build(p: Any) -> None:
        v = popxl.variable(np.zeros(2, np.float32), name="v")
        with p.stage(0):
            v + 1
        with p.stage(1):
            ops.var_updates.accumulate_(v, popxl.constant(np.ones(2, np.float32)))

    with pytest.raises(NotImplementedError, match=r"v is updated in pipeline stage\(s\) \[1\]"):
        _pipeline(4, build)


def test_stash_to_the_same_or_an_earlier_stage_is_refused() -> None:
    def build(p: Any) -> None:
        with p.stage(1):
            x = popxl.constant(1.0) + 1
            p.stash_and_restore_tensor(x)

    with pytest.raises(ValueError, match="to a later stage, not to stage 1"):
        _pipeline(4, build)


def test_bad_stage_is_refused() -> None:
    def build(p: Any) -> None:
        with p.stage(-1):
            pass

    with pytest.raises(ValueError, match="non-negative int"):
        _pipeline(4, build)
