"""Strided collectives against NumPy for every grouping of eight replicas."""

from __future__ import annotations

import math

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.transforms import autodiff
from popxl_addons.collectives import (
    PatternNotAppliedError,
    replicated_all_gather_strided,
    replicated_all_reduce_strided,
    replicated_all_reduce_strided_graph,
    replicated_all_reduce_strided_identical_grad_inputs,
    replicated_all_reduce_strided_identical_inputs,
    replicated_reduce_scatter_strided,
)
from popxl_addons.core import NamedTensors, apply_pre_alias_patterns

N = 8
SHAPE = (2, 3)
rng = np.random.default_rng(21)


def _groupings() -> list[tuple[int, int]]:
    return [(s, g) for s in range(1, N + 1) for g in range(2, N + 1) if N % (s * g) == 0]


def _members(r: int, stride: int, size: int) -> list[int]:
    base = (r // (stride * size)) * stride * size + r % stride
    return [base + k * stride for k in range(size)]


def _run(build: object, x: np.ndarray) -> np.ndarray:
    """Runs `build(tensor)` on each replica's row of `x`; returns each replica's output."""
    ir = popxl.Ir(replication=N)
    with ir.main_graph:
        h = popxl.h2d_stream(x.shape[1:], popxl.float32, "x")
        y = build(ops.host_load(h))  # type: ignore[operator]
        out = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(out, y)
    apply_pre_alias_patterns(ir)
    with popxl.Session(ir, "cpu") as s:
        return np.asarray(s.run({h: x})[out])


@pytest.mark.parametrize(("stride", "size"), _groupings())
def test_all_gather_concatenates_the_members_flattened(stride: int, size: int) -> None:
    x = rng.normal(size=(N, *SHAPE)).astype(np.float32)
    got = _run(lambda t: replicated_all_gather_strided(t, popxl.gir().replica_grouping(stride, size)), x)
    for r in range(N):
        np.testing.assert_array_equal(got[r], np.concatenate([x[m].ravel() for m in _members(r, stride, size)]))


@pytest.mark.parametrize("op", ["add", "mean"])
@pytest.mark.parametrize(("stride", "size"), _groupings())
def test_reduce_scatter_keeps_this_ranks_padded_shard(op: str, stride: int, size: int) -> None:
    x = rng.normal(size=(N, *SHAPE)).astype(np.float32)
    got = _run(lambda t: replicated_reduce_scatter_strided(t, op, popxl.gir().replica_grouping(stride, size)), x)
    part = math.ceil(math.prod(SHAPE) / size)
    assert got.shape == (N, part)
    for r in range(N):
        members = _members(r, stride, size)
        total = x[members].sum(0) if op == "add" else x[members].mean(0)
        padded = np.concatenate([total.ravel(), np.zeros(part * size - total.size, np.float32)])
        rank = members.index(r)
        np.testing.assert_allclose(got[r], padded[rank * part : (rank + 1) * part], rtol=1e-5)


FORMS = {
    # name: (function, forward reduces, gradient reduces)
    "plain": (replicated_all_reduce_strided, True, True),
    "identical_inputs": (replicated_all_reduce_strided_identical_inputs, False, True),
    "identical_grad_inputs": (replicated_all_reduce_strided_identical_grad_inputs, True, False),
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("op", ["add", "mean"])
def test_all_reduce_forward_and_gradient(form: str, op: str) -> None:
    fn, fwd_reduces, grad_reduces = FORMS[form]
    x = rng.normal(size=(N, *SHAPE)).astype(np.float32)
    dy = rng.normal(size=(N, *SHAPE)).astype(np.float32)

    def reduce(v: np.ndarray, members: list[int]) -> np.ndarray:
        return v[members].sum(0) if op == "add" else v[members].mean(0)

    for stride, size in _groupings():
        ir = popxl.Ir(replication=N)
        with ir.main_graph:
            group = ir.replica_grouping(stride, size)
            hx, hd = popxl.h2d_stream(SHAPE, popxl.float32, "x"), popxl.h2d_stream(SHAPE, popxl.float32, "dy")
            graph = ir.create_graph(lambda t, group=group: fn(t, op, group), hx.spec)
            info = autodiff(graph)
            site = ops.call_with_info(graph, ops.host_load(hx))
            (dx,) = ops.call(info.graph, ops.host_load(hd), inputs_dict=info.inputs_dict(site))
            y_out, dx_out = popxl.d2h_stream(SHAPE, popxl.float32, "y"), popxl.d2h_stream(SHAPE, popxl.float32, "dx")
            ops.host_store(y_out, site.outputs[0])
            ops.host_store(dx_out, dx)
        apply_pre_alias_patterns(ir)
        with popxl.Session(ir, "cpu") as s:
            out = s.run({hx: x, hd: dy})
        for r in range(N):
            m = _members(r, stride, size)
            where = f"{form} {op} stride={stride} size={size} replica {r}"
            want_y = reduce(x, m) if fwd_reduces else x[r]
            want_dx = reduce(dy, m) if grad_reduces else dy[r]
            np.testing.assert_allclose(out[y_out][r], want_y, rtol=1e-5, err_msg=where)
            np.testing.assert_allclose(out[dx_out][r], want_dx, rtol=1e-5, err_msg=where)


def test_graph_reduces_each_named_tensor() -> None:
    a = rng.normal(size=(N, 3)).astype(np.float32)
    b = rng.normal(size=(N, 2, 2)).astype(np.float32)
    ir = popxl.Ir(replication=N)
    with ir.main_graph:
        group = ir.replica_grouping(2, 4)
        ha, hb = popxl.h2d_stream((3,), popxl.float32, "a"), popxl.h2d_stream((2, 2), popxl.float32, "b")
        ts = NamedTensors(a=ops.host_load(ha), b=ops.host_load(hb))
        graph, names = replicated_all_reduce_strided_graph(ts, "add", group)
        reduced = NamedTensors.pack(names, graph.bind(ts).call())
        oa, ob = popxl.d2h_stream((3,), popxl.float32, "ra"), popxl.d2h_stream((2, 2), popxl.float32, "rb")
        ops.host_store(oa, reduced.a)
        ops.host_store(ob, reduced.b)
    with popxl.Session(ir, "cpu") as s:
        out = s.run({ha: a, hb: b})
    for r in range(N):
        m = _members(r, 2, 4)
        np.testing.assert_allclose(out[oa][r], a[m].sum(0), rtol=1e-5)
        np.testing.assert_allclose(out[ob][r], b[m].sum(0), rtol=1e-5)


def test_unsupported_reduce_op_is_named() -> None:
    ir = popxl.Ir(replication=N)
    with ir.main_graph:
        x = popxl.variable(np.zeros(3, np.float32))
        with pytest.raises(ValueError, match="replicated_all_reduce_strided supports only op in"):
            replicated_all_reduce_strided(x, "max")
        with pytest.raises(ValueError, match="replicated_reduce_scatter_strided supports only op in"):
            replicated_reduce_scatter_strided(x, "mul")


def test_identical_inputs_gradient_needs_the_pattern() -> None:
    ir = popxl.Ir(replication=N)
    with ir.main_graph:
        h = popxl.h2d_stream(SHAPE, popxl.float32, "x")
        graph = ir.create_graph(
            lambda t: replicated_all_reduce_strided_identical_grad_inputs(t, group=ir.replica_grouping(2, 4)), h.spec
        )
        (y,) = ops.call(autodiff(graph).graph, ops.host_load(h))
        ops.host_store(popxl.d2h_stream(SHAPE, popxl.float32, "y"), y)
    with pytest.raises(PatternNotAppliedError, match="OpToIdentityPattern"):
        popxl.Session(ir, "cpu")
