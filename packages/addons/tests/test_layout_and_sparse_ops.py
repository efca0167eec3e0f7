"""popxl-addons' `linear_layout` and static sparse matmul against NumPy, and their op kinds in the sweep."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import popxl
import popxl_addons as addons
from popxl.op import REGISTRY
from popxl.op_contract import OpExample, check_op, float16_errors
from popxl_addons.core import dense_const_sparse_matmul, linear_layout, random_sparse

RNG = np.random.default_rng(5)
MODULES = {"popxl_addons.core.ops.linear_layout", "popxl_addons.core.ops.static_sparse_ops"}

Array = np.ndarray[Any, Any]


class CSR:
    """A CSR description written directly from a dense matrix (not scipy's, so the op's duck typing is tested)."""

    def __init__(self, dense: Array) -> None:
        rows, cols = np.nonzero(dense)
        self.data = dense[rows, cols].astype(np.float32)
        self.indices = cols.astype(np.int32)
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=dense.shape[0]))]).astype(np.int32)


def _sparse(k: int, n: int) -> Array:
    dense = RNG.normal(size=(k, n)).astype(np.float32)
    dense[RNG.random(size=(k, n)) < 0.6] = 0
    dense[0, 0] = 1.5  # at least one non-zero value
    return dense


def _csr_attrs(dense: Array) -> dict[str, Any]:
    csr = CSR(dense)
    return {"nz": csr.data, "cols": csr.indices, "rows": csr.indptr, "output_cols": dense.shape[1]}


# The same constant matrix in every run of the example (float16_errors builds it twice).
SWEEP_RHS = _sparse(5, 4)


def _sparse_example(ir: popxl.Ir) -> OpExample:
    rhs = SWEEP_RHS
    lhs = RNG.normal(size=(3, 5)).astype(np.float32)
    return OpExample([lhs], _csr_attrs(rhs), reference=lambda x: [x @ jnp.asarray(rhs)])


def _layout_example(ir: popxl.Ir) -> OpExample:
    t = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    return OpExample([t], {"bs": 4}, reference=lambda v: [v])


EXAMPLES: dict[str, Callable[[popxl.Ir], OpExample]] = {
    "dense_const_sparse_matmul": _sparse_example,
    "linear_layout": _layout_example,
}


def test_every_op_kind_of_these_modules_has_an_example() -> None:
    ours = {name for name, opdef in REGISTRY.items() if opdef.lower.__module__ in MODULES}
    assert ours == set(EXAMPLES)


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_registry_declarations(kind: str) -> None:
    check_op(REGISTRY[kind], EXAMPLES[kind])


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_float16_close_to_float32(kind: str) -> None:
    for scale, per_result in float16_errors(REGISTRY[kind], EXAMPLES[kind]).items():
        assert per_result
        for label, error in per_result.items():
            assert error < 1e-2, f"{label} at std {scale}: {error}"


# ---- in programs -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "dtype"), [((6, 7), np.float32), ((1, 6, 7), np.float32), ((6, 7), np.float16)])
def test_dense_sparse_matmul_and_its_dense_gradient(shape: tuple[int, ...], dtype: Any) -> None:
    rhs = _sparse(7, 5)
    lhs = RNG.normal(size=shape).astype(dtype)
    dy = RNG.normal(size=(*shape[:-1], 5)).astype(dtype)
    pdtype = popxl.dtypes.as_dtype(np.dtype(dtype))
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(lhs, pdtype)
        graph = ir.create_graph(lambda t: dense_const_sparse_matmul(t, CSR(rhs), 5), x)
        dgraph = popxl.transforms.autodiff(graph)
        info = popxl.ops.call_with_info(graph, x)
        (dx,) = popxl.ops.call(dgraph.graph, popxl.constant(dy), inputs_dict=dgraph.inputs_dict(info))
        outs = [addons.host_store(info.outputs[0]), addons.host_store(dx)]
    with popxl.Session(ir, "cpu") as session:
        result = session.run()
    got_y, got_dx = (np.asarray(result[o], np.float64) for o in outs)
    # The values are held in lhs's type, as on the IPU; the products are summed in float32 or wider.
    held = rhs.astype(dtype).astype(np.float64)
    tol = 1e-5 if dtype == np.float32 else 2e-3
    np.testing.assert_allclose(got_y, lhs.astype(np.float64) @ held, rtol=tol, atol=tol)
    np.testing.assert_allclose(got_dx, dy.astype(np.float64) @ held.T, rtol=tol, atol=tol)
    assert got_y.shape == (*shape[:-1], 5) and got_dx.shape == shape


def test_dense_sparse_matmul_sums_repeated_entries_and_takes_scipy() -> None:
    scipy_sparse = pytest.importorskip("scipy.sparse")
    rhs = scipy_sparse.csr_matrix((np.array([1.0, 2.0, 3.0]), np.array([1, 1, 0]), np.array([0, 2, 3])), shape=(2, 3))
    lhs = RNG.normal(size=(4, 2)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        y = dense_const_sparse_matmul(popxl.variable(lhs), rhs, 3)
        out = addons.host_store(y)
    with popxl.Session(ir, "cpu") as session:
        got = np.asarray(session.run()[out])
    want = np.array([[0.0, 3.0, 0.0], [3.0, 0.0, 0.0]], np.float32)  # row 0 holds 1 + 2 at column 1
    np.testing.assert_allclose(got, lhs @ want, rtol=1e-6)


def test_dense_sparse_matmul_refuses_bad_input() -> None:
    rhs = CSR(_sparse(3, 2))
    with popxl.Ir().main_graph:
        with pytest.raises(RuntimeError, match="int32 not currently supported"):
            dense_const_sparse_matmul(popxl.variable(np.zeros((2, 3), np.int32)), rhs, 2)
        x = popxl.variable(np.zeros((2, 3), np.float32))
        with pytest.raises(ValueError, match="does not match the sparse rhs's 3 rows"):
            dense_const_sparse_matmul(popxl.variable(np.zeros((2, 4), np.float32)), rhs, 2)
        with pytest.raises(ValueError, match=r"\(m, k\) or \(1, m, k\)"):
            dense_const_sparse_matmul(popxl.variable(np.zeros((2, 2, 3), np.float32)), rhs, 2)
        with pytest.raises(ValueError, match=r"column indices must be in \[0, 1\)"):
            dense_const_sparse_matmul(x, rhs, 1)
        with pytest.raises(ValueError, match="output_cols must be a positive integer"):
            dense_const_sparse_matmul(x, rhs, 0)
        # Reversed, it starts at the count of values, never 0 (dropping its last entry passes when the
        # random last row is empty).
        rhs.indptr = rhs.indptr[::-1]
        with pytest.raises(ValueError, match="indptr must rise from 0"):
            dense_const_sparse_matmul(x, rhs, 2)


def test_random_sparse_draws_as_scipy_does() -> None:
    stats = pytest.importorskip("scipy.stats")
    dense = RNG.normal(size=(6, 5)).astype(np.float32)
    np.random.seed(7)
    zeroed = stats.bernoulli.rvs(1 - 0.3, size=dense.shape).astype(bool)
    np.random.seed(7)
    got = random_sparse(dense.copy(), density=0.3)
    np.testing.assert_array_equal(got, np.where(zeroed, 0, dense))
    assert random_sparse(np.ones((3, 3)), density=0.0).sum() == 1  # one value is always kept
    with pytest.raises(ValueError, match="density must be in"):
        random_sparse(dense, density=1.5)


def test_linear_layout_is_the_identity_with_its_gradient() -> None:
    t = RNG.normal(size=(3, 8)).astype(np.float16)
    dy = RNG.normal(size=(3, 8)).astype(np.float16)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(t)
        graph = ir.create_graph(lambda v: linear_layout(v, bs=4) * 2, x)
        dgraph = popxl.transforms.autodiff(graph)
        info = popxl.ops.call_with_info(graph, x)
        (dx,) = popxl.ops.call(dgraph.graph, popxl.constant(dy), inputs_dict=dgraph.inputs_dict(info))
        outs = [addons.host_store(info.outputs[0]), addons.host_store(dx)]
    with popxl.Session(ir, "cpu") as session:
        result = session.run()
    # Doubling a float16 of size about 1 is exact (no overflow), on the device and in NumPy.
    np.testing.assert_array_equal(np.asarray(result[outs[0]]), t * 2)
    np.testing.assert_array_equal(np.asarray(result[outs[1]]), dy * 2)
    with ir.main_graph, pytest.raises(ValueError, match="grain size `bs` must be a positive integer"):
        linear_layout(x, bs=0)


def test_popxl_addons_paths_resolve_here() -> None:
    from popxl_addons.ops.linear_layout import linear_layout as layout
    from popxl_addons.ops.linear_layout.linear_layout import linear_layout as layout_op
    from popxl_addons.ops.static_sparse_ops import dense_const_sparse_matmul as matmul
    from popxl_addons.ops.static_sparse_ops import random_sparse as sparsify
    from popxl_addons.ops.static_sparse_ops.dense_sparse_matmul import dense_const_sparse_matmul as matmul_op

    assert layout is layout_op is linear_layout
    assert matmul is matmul_op is dense_const_sparse_matmul
    assert sparsify is random_sparse
