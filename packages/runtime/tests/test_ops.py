"""Every maths and shape op against NumPy."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from runtime_helpers import run_main

import popxl
from popxl import ops

rng = np.random.default_rng(0)
X = rng.normal(size=(3, 4)).astype(np.float32)
Y = rng.normal(size=(3, 4)).astype(np.float32)
POS = np.abs(X) + 0.5


def _gelu(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


UNARY: dict[str, tuple[Callable[[popxl.Tensor], popxl.Tensor], Callable[..., Any], np.ndarray[Any, Any]]] = {
    "negate": (ops.negate, np.negative, X),
    "neg_operator": (lambda t: -t, np.negative, X),
    "exp": (ops.exp, np.exp, X),
    "log": (ops.log, np.log, POS),
    "sqrt": (ops.sqrt, np.sqrt, POS),
    "tanh": (ops.tanh, np.tanh, X),
    "sigmoid": (ops.sigmoid, lambda x: 1 / (1 + np.exp(-x)), X),
    "relu": (ops.relu, lambda x: np.maximum(x, 0), X),
    "gelu": (ops.gelu, _gelu, X),
    "abs": (ops.abs, np.abs, X),
    "sin": (ops.sin, np.sin, X),
    "cos": (ops.cos, np.cos, X),
    "square": (ops.square, np.square, X),
    "reciprocal": (ops.reciprocal, np.reciprocal, POS),
    "identity": (ops.identity, lambda x: x, X),
    "detach": (ops.detach, lambda x: x, X),
    "io_tile_copy": (ops.io_tile_copy, lambda x: x, X),
    "softmax": (lambda t: ops.softmax(t, axis=1), lambda x: np.exp(x) / np.exp(x).sum(1, keepdims=True), X),
    "sum": (lambda t: ops.sum(t, 1), lambda x: x.sum(1), X),
    "sum_all": (ops.sum, np.sum, X),
    "mean_keep": (lambda t: ops.mean(t, 0, keepdims=True), lambda x: x.mean(0, keepdims=True), X),
    "max": (lambda t: ops.max(t, [0, 1]), np.max, X),
    "min": (lambda t: ops.min(t, -1), lambda x: x.min(-1), X),
    "sumsquare": (lambda t: ops.sumsquare(t, 0), lambda x: (x * x).sum(0), X),
    "logsumexp": (lambda t: ops.logsumexp(t, 1), lambda x: np.log(np.exp(x).sum(1)), X),
    "split": (lambda t: ops.split(t, [1, 3], axis=1)[1], lambda x: x[:, 1:], X),
    "scaled_add": (lambda t: ops.scaled_add(t, t * t, 2.0, 0.5), lambda x: 2 * x + 0.5 * x * x, X),
    "reshape": (lambda t: ops.reshape(t, (2, -1)), lambda x: x.reshape(2, -1), X),
    "flatten": (ops.flatten, lambda x: x.reshape(-1), X),
    "transpose": (ops.transpose, lambda x: x.T, X),
    "T": (lambda t: t.T, lambda x: x.T, X),
    "slice": (lambda t: ops.slice(t, 1, 3, axis=1), lambda x: x[:, 1:3], X),
    "slice_step": (lambda t: ops.slice(t, [0, 0], [3, 4], [2, 2]), lambda x: x[0:3:2, 0:4:2], X),
    "getitem": (lambda t: t[1], lambda x: x[1], X),
    "getitem_slices": (lambda t: t[1:, ::2], lambda x: x[1:, ::2], X),
    "expand": (lambda t: ops.expand(t, (2, 3, 4)), lambda x: np.broadcast_to(x, (2, 3, 4)), X),
    "squeeze": (lambda t: ops.squeeze(ops.reshape(t, (1, 3, 1, 4))), lambda x: x, X),
    "cast": (lambda t: ops.cast(t, popxl.int32), lambda x: x.astype(np.int32), X * 10),
    "scale_operator": (lambda t: t * 3.0 + 1, lambda x: x * 3 + 1, X),
    "rsub_operator": (lambda t: 1.0 - t, lambda x: 1 - x, X),
    "rdiv_operator": (lambda t: 2.0 / t, lambda x: 2 / x, POS),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name: str) -> None:
    op, ref, data = UNARY[name]
    out = run_main(lambda: {"y": op(popxl.constant(data))})["y"]
    np.testing.assert_allclose(out, ref(data), rtol=1e-5, atol=1e-6)


BINARY: dict[str, tuple[Callable[[popxl.Tensor, popxl.Tensor], popxl.Tensor], Callable[..., Any]]] = {
    "add": (ops.add, np.add),
    "add_operator": (lambda a, b: a + b, np.add),
    "sub": (ops.sub, np.subtract),
    "mul": (ops.mul, np.multiply),
    "div": (ops.div, np.divide),
    "pow": (lambda a, b: ops.pow(ops.abs(a), b), lambda a, b: np.abs(a) ** b),
    "maximum": (ops.maximum, np.maximum),
    "minimum": (ops.minimum, np.minimum),
    "equal": (ops.equal, np.equal),
    "greater": (ops.greater, np.greater),
    "less": (ops.less, np.less),
    "where": (lambda a, b: ops.where(ops.greater(a, b), a, b), lambda a, b: np.where(a > b, a, b)),
    "logical_and": (
        lambda a, b: ops.logical_and(ops.greater(a, b), ops.less(a, b)),
        lambda a, b: np.logical_and(a > b, a < b),
    ),
    "logical_or": (
        lambda a, b: ops.logical_or(ops.greater(a, b), ops.less(a, b)),
        lambda a, b: np.logical_or(a > b, a < b),
    ),
    "logical_not": (lambda a, b: ops.logical_not(ops.greater(a, b)), lambda a, b: ~(a > b)),
}


@pytest.mark.parametrize("name", list(BINARY))
def test_binary(name: str) -> None:
    op, ref = BINARY[name]
    out = run_main(lambda: {"y": op(popxl.constant(X), popxl.constant(Y))})["y"]
    np.testing.assert_allclose(out, ref(X, Y), rtol=1e-5)


def test_broadcasting_add() -> None:
    b = Y[0]
    out = run_main(lambda: {"y": popxl.constant(X) + popxl.constant(b)})["y"]
    # One IEEE add on each side, correctly rounded: the same float32 on any machine.
    np.testing.assert_allclose(out, X + b)


@pytest.mark.parametrize(
    ("a_shape", "b_shape"), [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((4,), (4, 5))]
)
def test_matmul(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    a = rng.normal(size=a_shape).astype(np.float32)
    b = rng.normal(size=b_shape).astype(np.float32)
    out = run_main(lambda: {"y": popxl.constant(a) @ popxl.constant(b)})["y"]
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_integer_division_and_remainder_truncate() -> None:
    a = np.array([7, -7, 7, -7, 6], np.int32)
    b = np.array([2, 2, -2, -2, 3], np.int32)
    out = run_main(lambda: {"q": popxl.constant(a) / popxl.constant(b), "r": popxl.constant(a) % popxl.constant(b)})
    np.testing.assert_array_equal(out["q"], np.trunc(a / b).astype(np.int32))
    np.testing.assert_array_equal(out["r"], np.fmod(a, b))


def test_concat() -> None:
    out = run_main(lambda: {"y": ops.concat([popxl.constant(X), popxl.constant(Y)], axis=1)})["y"]
    np.testing.assert_array_equal(out, np.concatenate([X, Y], axis=1))


@pytest.mark.parametrize("groups", [1, 2])
def test_group_norm(groups: int) -> None:
    w = rng.normal(size=(4,)).astype(np.float32)
    b = rng.normal(size=(4,)).astype(np.float32)

    def build() -> dict[str, popxl.Tensor]:
        return {"y": ops.group_norm(popxl.constant(X), popxl.constant(w), popxl.constant(b), groups, eps=1e-5)}

    g = X.reshape(3, groups, -1)
    norm = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(X.shape)
    np.testing.assert_allclose(run_main(build)["y"], norm * w + b, rtol=1e-4, atol=1e-5)


def test_in_place_add_updates_the_variable() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(X, name="v")
        alias = v
        alias += popxl.constant(Y)
        assert alias is v  # popxl returns the updated tensor itself
    with popxl.Session(ir, "cpu") as session:
        session.run()
    # One IEEE add on each side, correctly rounded: the same float32 on any machine.
    np.testing.assert_allclose(session.get_tensor_data(v), X + Y)


# The moving average's weights as popxl has them: f in float32, and 1 - f in float32 (exact, by Sterbenz's lemma).
_F = float(np.float32(0.9))


@pytest.mark.parametrize(
    ("update", "terms"),
    [
        (lambda t, x: ops.var_updates.accumulate_(t, x, 0.5), lambda t, x: [t, 0.5 * x]),
        (lambda t, x: ops.var_updates.accumulate_square_(t, x), lambda t, x: [t, x * x]),
        (lambda t, x: ops.var_updates.accumulate_mean_(t, x, 3.0), lambda t, x: [t * 0.75, x * 0.25]),
        (lambda t, x: ops.var_updates.accumulate_moving_average_(t, x, 0.9), lambda t, x: [_F * t, (1 - _F) * x]),
        (lambda t, x: ops.var_updates.scaled_add_(t, x, 2.0, 3.0), lambda t, x: [2 * t, 3 * x]),
        (lambda t, x: ops.var_updates.copy_var_update_(t, x), lambda t, x: [x]),
    ],
)
def test_var_updates(update: Callable[..., Any], terms: Callable[..., list[Any]]) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(X, name="v")
        update(v, popxl.constant(Y))
    with popxl.Session(ir, "cpu") as session:
        session.run()
    # `terms` are the update's products, exact in float64; popxl rounds each to float32, then their sum, unless
    # the processor fuses a product into the add. Each rounding is off by at most u = 2**-24 of what it rounds,
    # so the update is within 2u(1 + u) of the terms' magnitudes summed: exact for the copy, and far below what a
    # wrong weight moves it by.
    parts = np.asarray(terms(X.astype(np.float64), Y.astype(np.float64)))
    u = 2.0**-24
    bound = 2 * u * (1 + u) * np.abs(parts).sum(0)
    error = np.abs(session.get_tensor_data(v).astype(np.float64) - parts.sum(0))
    assert (error <= bound).all(), f"{int((error > bound).sum())} values beyond the rounding bound: {error.max()}"


def test_random_ops_follow_the_seed() -> None:
    seed = np.array([1, 2], np.uint32)

    def build() -> dict[str, popxl.Tensor]:
        s = popxl.constant(seed)
        a, b = ops.split_random_seed(s)
        return {
            "u1": ops.random_uniform(a, (1000,)),
            "u2": ops.random_uniform(a, (1000,)),
            "n": ops.random_normal(b, (2000,), mean=1.0, std=2.0),
            "d": ops.dropout(popxl.constant(np.ones((1000,), np.float32)), b, 0.25),
        }

    out = run_main(build)
    # One seed, one program: the same random bits through the same arithmetic, so the same values on any machine.
    np.testing.assert_array_equal(out["u1"], out["u2"])
    assert out["u1"].min() >= 0 and out["u1"].max() < 1
    assert abs(out["n"].mean() - 1.0) < 0.2 and abs(out["n"].std() - 2.0) < 0.2
    kept = out["d"] != 0
    # A kept one is scaled by 1 / (1 - 0.25), rounded to float32 once: within 3e-8 of 4/3, inside rtol's 1e-7.
    np.testing.assert_allclose(out["d"][kept], 1 / 0.75)
    assert 0.65 < kept.mean() < 0.85


def test_op_errors_name_the_problem() -> None:
    ir = popxl.Ir()
    other = ir.create_empty_graph("other")
    with other:
        foreign = popxl.graph_input((2,), popxl.float32, "foreign")
    with ir.main_graph:
        a = popxl.constant(np.zeros((2, 3), np.float32))
        with pytest.raises(ValueError, match="not in the current Graph"):
            ops.add(a, foreign)
        with pytest.raises(TypeError, match="not a popxl Tensor"):
            ops.add(a, np.zeros(3))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="share one dtype"):
            ops.add(a, popxl.constant(np.zeros((2, 3), np.int32)))
        with pytest.raises(ValueError, match="do not broadcast"):
            ops.add(a, popxl.constant(np.zeros((4,), np.float32)))
        with pytest.raises(ValueError, match="matmul shapes"):
            ops.matmul(a, a)
        with pytest.raises(ValueError, match="Cannot reshape"):
            ops.reshape(a, (4,))
        with pytest.raises(ValueError, match="no elements"):
            _ = a + np.zeros((0,))


def test_indexing_ops() -> None:
    idx = np.array([[2, 0], [1, 5]], np.int32)

    def build() -> dict[str, popxl.Tensor]:
        t = popxl.constant(X)
        start = popxl.constant(np.array([1, 2], np.uint32))
        update = popxl.constant(np.full((2, 2), 9, np.float32))
        labels = popxl.constant(np.array([0, 3, 1], np.int32))
        return {
            "gather": ops.gather(t, popxl.constant(idx[0]), axis=0),
            "gather_zero": ops.gather(t, idx, axis=1, zero_OOR=True),
            "slice": ops.dynamic_slice(t, start, [0, 1], [2, 2]),
            "update": ops.dynamic_update(t, start, update, [0, 1], [2, 2]),
            "onehot": ops.onehot(labels, 4, popxl.constant(np.array([0, 1], np.float32))),
            "argmax": ops.argmax(t, 1),
            "argmin": ops.argmin(t, 0, keepdim=True),
        }

    out = run_main(build)
    np.testing.assert_array_equal(out["gather"], X[[2, 0]])
    expected = np.take(X, np.clip(idx, 0, 3), axis=1)
    expected[:, 1, 1] = 0
    np.testing.assert_array_equal(out["gather_zero"], expected)
    np.testing.assert_array_equal(out["slice"], X[1:3, 2:4])
    updated = X.copy()
    updated[1:3, 2:4] = 9
    np.testing.assert_array_equal(out["update"], updated)
    np.testing.assert_array_equal(out["onehot"], np.eye(4, dtype=np.float32)[[0, 3, 1]])
    np.testing.assert_array_equal(out["argmax"], X.argmax(1))
    np.testing.assert_array_equal(out["argmin"], X.argmin(0)[None])


def test_in_place_dynamic_update_writes_a_variable() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.zeros((4, 3), np.float32), name="v")
        ops.dynamic_update_(
            v, popxl.constant(np.array([2], np.uint32)), popxl.constant(np.ones((1, 3), np.float32)), [0], [1]
        )
    with popxl.Session(ir, "cpu") as s:
        s.run()
    expected = np.zeros((4, 3), np.float32)
    expected[2] = 1
    np.testing.assert_array_equal(s.get_tensor_data(v), expected)


@pytest.mark.parametrize("dtype", [popxl.float16, popxl.bfloat16, popxl.int8, popxl.uint32, popxl.bool])
def test_dtypes_round_trip(dtype: popxl.dtype) -> None:
    data = np.array([[0, 1], [2, 3]]).astype(dtype.as_numpy())
    out = run_main(lambda: {"y": ops.cast(ops.cast(popxl.constant(data, dtype), popxl.float32), dtype)})["y"]
    assert out.dtype == dtype.as_numpy()
    np.testing.assert_array_equal(out, data)


def test_print_tensor_prints_the_value_and_its_gradient(capfd: pytest.CaptureFixture[str]) -> None:
    from popxl.transforms import autodiff

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.asarray([1.0, 2.0], np.float32), name="x")
        graph = ir.create_graph(lambda t: ops.print_tensor(t * 3, "tripled", print_gradient=True), x)
        info = autodiff(graph)
        site = ops.call_with_info(graph, x)
        (dx,) = ops.call(
            info.graph, popxl.constant(np.asarray([1.0, -1.0], np.float32)), inputs_dict=info.inputs_dict(site)
        )
        out = popxl.d2h_stream((2,), popxl.float32, "dx")
        ops.host_store(out, dx)
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[out], [3.0, -3.0])
    printed = capfd.readouterr().err
    assert "tripled: [3. 6.]" in printed and "tripled_gradient: [ 1. -1.]" in printed


@pytest.mark.parametrize("mode", ["simulate", "devices"])
def test_print_tensor_prints_once_per_replica_titled_with_its_index(
    mode: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """Each replica prints its own value as `<title>_replica_<i>`, a value all replicas share included."""
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        h = popxl.h2d_stream((2,), popxl.float32, "x")
        x = ops.host_load(h)
        ops.print_tensor(x, "own")
        ops.print_tensor(ops.collectives.replicated_all_reduce(x), "shared")
    data = np.arange(8, dtype=np.float32).reshape(4, 2)
    with popxl.Session(ir, "cpu", replica_mode=mode) as session:
        session.run({h: data})
    lines = capfd.readouterr().err.splitlines()
    for r in range(4):
        assert lines.count(f"own_replica_{r}: [{data[r, 0]:.0f}. {data[r, 1]:.0f}.]") == 1
        assert lines.count(f"shared_replica_{r}: [12. 16.]") == 1


def test_adam_step_from_popxl_var_updates_matches_numpy_over_runs() -> None:
    rng = np.random.default_rng(4)
    w0 = rng.normal(size=5).astype(np.float32)
    grads = rng.normal(size=(3, 5)).astype(np.float32)
    lr, b1, b2, eps, wd = 0.1, 0.9, 0.999, 1e-5, 0.01
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        w = popxl.variable(w0, name="w")
        m = popxl.variable(np.zeros(5, np.float32), name="m")
        v = popxl.variable(np.zeros(5, np.float32), name="v")
        step = popxl.variable(np.float32(0), name="step")
        h = popxl.h2d_stream((5,), popxl.float32, "grad")
        g = ops.host_load(h)
        ops.var_updates.accumulate_moving_average_(m, g, b1)
        ops.var_updates.accumulate_moving_average_square_(v, g, b2)
        x = ops.var_updates.adam_updater(m, v, w, step, wd, b1, b2, eps)
        ops.scaled_add_(w, x, b=-lr)
    ww, mm, vv = w0.astype(np.float64), np.zeros(5), np.zeros(5)
    with popxl.Session(ir, "cpu") as session:
        for t in range(1, 4):
            session.run({h: grads[t - 1]})
            mm = b1 * mm + (1 - b1) * grads[t - 1]
            vv = b2 * vv + (1 - b2) * grads[t - 1] ** 2
            update = (mm / (1 - b1**t)) / (np.sqrt(vv / (1 - b2**t)) + eps) + wd * ww
            ww = ww - lr * update
        np.testing.assert_allclose(session.get_tensor_data(w), ww, rtol=1e-5, atol=1e-6)
        assert session.get_tensor_data(step) == 3


def test_accumulator_scale_and_zero() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        a = popxl.variable(np.full(3, 4.0, np.float32), name="a")
        b = popxl.variable(np.full(3, 4.0, np.float32), name="b")
        ops.var_updates.accumulator_scale_(a, 0.25)
        ops.var_updates.accumulator_zero_(b)
    with popxl.Session(ir, "cpu") as session:
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(a), np.ones(3, np.float32))
        np.testing.assert_array_equal(session.get_tensor_data(b), np.zeros(3, np.float32))
