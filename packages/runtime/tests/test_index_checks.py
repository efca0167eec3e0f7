"""Ops that take an index tensor check it at run time: out of range raises, unchecked it does as documented."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import popxl
from popxl import OutOfRangeError, ops

X = np.arange(8, dtype=np.float32)
M = np.arange(24, dtype=np.float32).reshape(4, 6)

# name -> (index shape, build(x, m, index) -> output, unchecked numpy reference(index))
Build = Callable[[popxl.Tensor, popxl.Tensor, popxl.Tensor], popxl.Tensor]
Reference = Callable[[np.ndarray], np.ndarray]


def _scatter_reference(i: np.ndarray) -> np.ndarray:
    out = X.copy()
    for k, v in zip(i, [10.0, 20.0]):
        if -8 <= k < 8:
            out[k] = v
    return out


def _scatter_reduce_reference(i: np.ndarray) -> np.ndarray:
    out = np.zeros(4, np.float32)
    for k, v in zip(i, [1.0, 2.0]):
        if 0 <= k < 4:
            out[k] += v
    return out


def _onehot_reference(i: np.ndarray) -> np.ndarray:
    return np.array([[1.0 if c == k else 0.0 for c in range(4)] for k in i], np.float32)


def _nll_reference(i: np.ndarray) -> np.ndarray:
    probs = np.full((2, 4), 0.25, np.float32)
    picked = np.array([probs[r, k] if 0 <= k < 4 else 0.0 for r, k in enumerate(i)], np.float32)
    return -np.log(np.maximum(picked, np.float32(1e-7)))


def _sparse_reference(i: np.ndarray) -> np.ndarray:
    out = X.copy()
    for k, v in zip(i, [1.0, 2.0]):
        if 0 <= k < 8:
            out[k] += v
    return out


def _slice_reference(i: np.ndarray) -> np.ndarray:
    start = int(np.clip(i[0], 0, 6))
    return X[start : start + 2]


def _update_reference(i: np.ndarray) -> np.ndarray:
    start = int(np.clip(i[0], 0, 6))
    out = X.copy()
    out[start : start + 2] = -1.0
    return out


CASES: dict[str, tuple[tuple[int, ...], Build, Reference, str]] = {
    "dynamic_slice": (
        (1,),
        lambda x, m, i: ops.dynamic_slice(x, i, [0], [2]),
        _slice_reference,
        r"dynamic_slice along axis 0 \(size 2 of 8\): index {i} is out of range \[0, 7\)",
    ),
    "dynamic_update": (
        (1,),
        lambda x, m, i: ops.dynamic_update(x, i, popxl.constant(np.full(2, -1.0, np.float32)), [0], [2]),
        _update_reference,
        r"dynamic_update along axis 0 \(size 2 of 8\): index {i} is out of range \[0, 7\)",
    ),
    "gather": (
        (2,),
        lambda x, m, i: ops.gather(x, i),
        lambda i: X[np.clip(i, 0, 7)],
        r"gather along axis 0: index {i} is out of range \[0, 8\)",
    ),
    "tied_gather": (
        (2,),
        lambda x, m, i: ops.tied_gather(m, i, axis=1),
        lambda i: M[:, np.clip(i, 0, 5)],
        r"gather along axis 1: index {i} is out of range \[0, 6\)",
    ),
    "groupedgather": (
        (2,),
        lambda x, m, i: ops.groupedgather(m.reshape((2, 12)), ops.reshape(i, (2, 1)), axis=1, group_size=2),
        lambda i: np.stack([M.reshape(2, 12)[g, [int(np.clip(i[g], 0, 11))]] for g in range(2)]),
        r"groupedgather along axis 1: index {i} is out of range \[0, 12\)",
    ),
    "scatter": (
        (2,),
        lambda x, m, i: ops.scatter(x, i, popxl.constant(np.array([10.0, 20.0], np.float32))),
        _scatter_reference,
        r"scatter along axis 0: index {i} is out of range \[-8, 8\)",
    ),
    "scatter_reduce": (
        (2,),
        lambda x, m, i: ops.scatter_reduce(
            popxl.constant(np.array([1.0, 2.0], np.float32)), i, reduction="sum", axis_size=4
        ),
        _scatter_reduce_reference,
        r"scatter_reduce along axis 0: index {i} is out of range \[0, 4\)",
    ),
    "onehot": (
        (2,),
        lambda x, m, i: ops.onehot(i, 4, popxl.constant(np.array([0.0, 1.0], np.float32))),
        _onehot_reference,
        r"onehot: index {i} is out of range \[0, 4\)",
    ),
    "sparse_accumulate_": (
        (2,),
        lambda x, m, i: ops.var_updates.sparse_accumulate_(x, popxl.constant(np.array([1.0, 2.0], np.float32)), i),
        _sparse_reference,
        r"sparse_accumulate_ along axis 0: index {i} is out of range \[0, 8\)",
    ),
    "nll_loss": (
        (2,),
        lambda x, m, i: ops.nll_loss(popxl.constant(np.full((2, 4), 0.25, np.float32)), i, reduction="none"),
        _nll_reference,
        r"nll_loss label: index {i} is out of range \[0, 4\)",
    ),
}


def _session(name: str, checks: bool) -> tuple[popxl.Session, popxl.HostToDeviceStream, popxl.DeviceToHostStream]:
    shape, build, _, _ = CASES[name]
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        counter = popxl.variable(np.zeros((), np.float32), name="counter")
        x = popxl.variable(X, name="x")
        m = popxl.variable(M, name="m")
        stream = popxl.h2d_stream(shape, popxl.int32, "index")
        ops.var_updates.accumulate_(counter, popxl.constant(np.float32(1)))
        out = build(x, m, ops.host_load(stream))
        result = popxl.d2h_stream(out.shape, out.dtype, "out")
        ops.host_store(result, out)
    session = popxl.Session(ir, "cpu", checks=checks)
    session.counter = counter  # type: ignore[attr-defined]
    return session, stream, result


def _index(name: str, bad: int) -> np.ndarray:
    return np.array([bad] if CASES[name][0] == (1,) else [1, bad], np.int32)


@pytest.mark.parametrize("bad", [100, -9])
@pytest.mark.parametrize("name", list(CASES))
def test_an_out_of_range_index_raises_naming_the_op_and_changes_nothing(name: str, bad: int) -> None:
    session, stream, result = _session(name, checks=True)
    with session:
        good = session.run({stream: _index(name, 0)})
        np.testing.assert_allclose(good[result], CASES[name][2](_index(name, 0)), rtol=1e-6)
        with pytest.raises(OutOfRangeError, match=CASES[name][3].format(i=bad)):
            session.run({stream: _index(name, bad)})
        np.testing.assert_array_equal(session.get_tensor_data(session.counter), 1)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", list(CASES))
def test_negative_indices_are_refused_where_the_op_has_no_meaning_for_them(name: str) -> None:
    session, stream, result = _session(name, checks=True)
    with session:
        if name == "scatter":
            # ONNX ScatterElements counts a negative index from the end.
            out = session.run({stream: _index(name, -1)})
            np.testing.assert_array_equal(out[result], _scatter_reference(_index(name, -1)))
        else:
            with pytest.raises(OutOfRangeError, match=CASES[name][3].format(i=-1)):
                session.run({stream: _index(name, -1)})


@pytest.mark.parametrize("bad", [100, -1, -9])
@pytest.mark.parametrize("name", list(CASES))
def test_unchecked_out_of_range_indices_do_as_documented(name: str, bad: int) -> None:
    session, stream, result = _session(name, checks=False)
    with session:
        out = session.run({stream: _index(name, bad)})
    np.testing.assert_allclose(out[result], CASES[name][2](_index(name, bad)), rtol=1e-6)


def test_the_documented_probes() -> None:
    """Unchecked, index 100 of 8 slices the last two and gathers the last; -1 gathers the first."""
    for name, bad, want in [("dynamic_slice", 100, [6, 7]), ("gather", 100, [1, 7]), ("gather", -1, [1, 0])]:
        session, stream, result = _session(name, checks=False)
        with session:
            out = session.run({stream: _index(name, bad)})
        np.testing.assert_array_equal(out[result], want)


def test_zero_oor_gathers_are_not_checked() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X)
        stream = popxl.h2d_stream((3,), popxl.int32, "index")
        out = ops.gather(x, ops.host_load(stream), zero_OOR=True)
        result = popxl.d2h_stream(out.shape, out.dtype, "out")
        ops.host_store(result, out)
    with popxl.Session(ir, "cpu") as session:
        got = session.run({stream: np.array([2, 100, -1], np.int32)})
    np.testing.assert_array_equal(got[result], [2, 0, 0])


def test_checks_inside_a_loop_and_through_gradients() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(X, name="w")
        stream = popxl.h2d_stream((), popxl.int32, "index")
        index = ops.host_load(stream)
        fwd = ir.create_graph(lambda t, i: ops.sum(ops.dynamic_slice(t, ops.reshape(i, (1,)), [0], [2])), w, index)
        grad = popxl.transforms.autodiff(fwd, grads_required=[fwd.inputs[0]])
        info = ops.call_with_info(fwd, w, index)
        (dw,) = ops.call(grad.graph, popxl.constant(np.float32(1)), inputs_dict=grad.inputs_dict(info))
        body = ir.create_empty_graph("body")
        with body:
            t = popxl.graph_input(X.shape, popxl.float32, "t")
            j = popxl.graph_input((), popxl.int32, "j")
            popxl.graph_output(t + ops.sum(ops.gather(t, ops.reshape(j, (1,)))) * 0)
            popxl.graph_output(j + 3)
        _, last = ops.repeat(body, 3, w, index)
        outs = [popxl.d2h_stream(dw.shape, dw.dtype, "dw"), popxl.d2h_stream((), popxl.int32, "last")]
        ops.host_store(outs[0], dw)
        ops.host_store(outs[1], last)
    with popxl.Session(ir, "cpu") as session:
        got = session.run({stream: np.int32(0)})
        np.testing.assert_array_equal(got[outs[0]], [1, 1, 0, 0, 0, 0, 0, 0])
        np.testing.assert_array_equal(got[outs[1]], 9)
        # The third iteration gathers at 0 + 3 + 3 = 6; starting at 3 it reaches 9.
        with pytest.raises(OutOfRangeError, match=r"gather along axis 0: index 9 is out of range \[0, 8\)"):
            session.run({stream: np.int32(3)})
