"""ops.conditional: the branch taken at run time, its side effects, its gradient and its errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.transforms import autodiff

X = np.array([1.0, 2.0, 3.0], np.float32)
Y = np.array([4.0, 5.0, 6.0], np.float32)
SPEC = popxl.TensorSpec((3,), popxl.float32)


@pytest.mark.placement
def test_branch_taken_at_run_time_with_its_side_effects() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        buf = popxl.remote_buffer((3,), popxl.float32)

        def then_fn(a: popxl.Tensor, b: popxl.Tensor) -> popxl.Tensor:
            ops.remote_store(buf, 0, a)
            return a * b

        then_g = ir.create_graph(then_fn, SPEC, SPEC)
        else_g = ir.create_graph(lambda a, b: a - b, SPEC, SPEC)
        cond_in = popxl.h2d_stream((), popxl.bool, "cond")
        x, y = popxl.constant(X), popxl.constant(Y)
        info = ops.conditional_with_info(
            ops.host_load(cond_in), then_g, else_g, [x, y], else_inputs_dict={else_g.inputs[0]: x, else_g.inputs[1]: y}
        )
        assert info.called_graph == (then_g, else_g)
        assert info.graph_to_parent(else_g.inputs[1]) is y and info.parent_to_graph(y) is then_g.inputs[1]
        assert info.is_parent_index_in_then_branch(2) and not info.is_parent_index_in_then_branch(3)
        out = popxl.d2h_stream((3,), popxl.float32, "out")
        ops.host_store(out, info.outputs[0])
        stored = popxl.d2h_stream((3,), popxl.float32, "stored")
        ops.host_store(stored, ops.remote_load(buf, 0))
    with popxl.Session(ir, "cpu") as s:
        took_else = s.run({cond_in: np.array(False)})
        took_then = s.run({cond_in: np.array(True)})
    np.testing.assert_array_equal(took_else[out], X - Y)
    np.testing.assert_array_equal(took_else[stored], np.zeros(3, np.float32))
    np.testing.assert_array_equal(took_then[out], X * Y)
    np.testing.assert_array_equal(took_then[stored], X)


@pytest.mark.parametrize("flag", [True, False])
def test_gradient_follows_the_branch_taken(flag: bool) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        then_g = ir.create_graph(lambda a, b: a * b, SPEC, SPEC)
        else_g = ir.create_graph(lambda a, b: a / b, SPEC, SPEC)

        def fwd(a: popxl.Tensor, b: popxl.Tensor) -> popxl.Tensor:
            (y,) = ops.conditional(popxl.constant(np.array(flag)), then_g, else_g, [a, b], [a, b])
            return ops.sum(ops.sin(y))

        graph = ir.create_graph(fwd, SPEC, SPEC)
        info = autodiff(graph)
        site = ops.call_with_info(graph, popxl.constant(X), popxl.constant(Y))
        grads = ops.call(info.graph, popxl.constant(np.float32(1.0)), inputs_dict=info.inputs_dict(site))
        outs = [popxl.d2h_stream((3,), popxl.float32, f"d{i}") for i in range(2)]
        for stream, g in zip(outs, grads):
            ops.host_store(stream, g)
    with popxl.Session(ir, "cpu") as s:
        got = s.run()
    want = jax.grad(lambda a, b: jnp.sum(jnp.sin(a * b if flag else a / b)), argnums=(0, 1))(X, Y)
    for stream, w in zip(outs, want):
        np.testing.assert_allclose(got[stream], np.asarray(w), rtol=1e-5)


def test_errors_name_the_branches() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        one = ir.create_graph(lambda a: a + 1.0, SPEC)
        two = ir.create_graph(lambda a: (a, a), SPEC)
        half = ir.create_graph(lambda a: ops.cast(a, popxl.float16), SPEC)
        x, c = popxl.constant(X), popxl.constant(np.array(True))
        with pytest.raises(ValueError, match="must have the same number of outputs: 1 != 2"):
            ops.conditional(c, one, two, [x], [x])
        with pytest.raises(ValueError, match="output 0 is float32 \\(3,\\) in `then_branch` but float16"):
            ops.conditional(c, one, half, [x], [x])
        with pytest.raises(ValueError, match="cond must be a single bool value"):
            ops.conditional(x, one, one, [x], [x])
        with pytest.raises(ValueError, match="missing inputs"):
            ops.conditional(c, one, one, [x])
