"""popxl-addons' static sparse matmul: a dense matrix times a constant, element-sparse matrix.

`dense_const_sparse_matmul(lhs, rhs, output_cols)` is popxl-addons' `DenseSparseMatMulOp`
(popsparse's static `denseSparseMatMul`): `lhs` `(m, k)` or `(1, m, k)` (one group only, as
popsparse's op takes it) times the sparse `(k, output_cols)` matrix that the CSR description
`rhs` gives (`data`, `indices`, `indptr`, as `scipy.sparse.csr_matrix` holds them; anything
with those three arrays will do, so scipy is not needed). As popxl-addons does, the non-zero
values are taken as float32 and held on the device in `lhs`'s type (float16 or float32 only).

Numerically the result is the dense product `lhs @ S` of the described matrix `S`, with the
products summed in float32 (popsparse's float32 partials) and returned in `lhs`'s type; on an
IPU popsparse skips the zeros, here XLA multiplies the dense matrix, which the op builds from
the description when it is lowered. The description is part of the op's attributes, as it is
in popxl-addons' (it is a constant of the program).

Gradient: popxl-addons gives the op none (it is meant for inference). This op kind gives the
dense operand its exact gradient `dy @ S^T`, itself a product of a dense matrix with a
constant sparse one, so the same op kind with the transposed description. The sparse matrix
is a constant and has no gradient.

`random_sparse(dense, density)` is popxl-addons' helper: it zeros each element of `dense` in
place with probability `1 - density` (keeping at least one element), drawing from NumPy's
global random state as popxl-addons does through scipy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import jax.numpy as jnp
import numpy as np

import popxl
from popxl.extension import Attrs, GradBuilder, LoweringContext, Op, OpDef, create_op, register

__all__ = ["dense_const_sparse_matmul", "random_sparse"]


class CSRMatrix(Protocol):
    """A matrix in compressed sparse row form, as `scipy.sparse.csr_matrix` holds one."""

    @property
    def data(self) -> Any:
        """The non-zero values, row after row."""

    @property
    def indices(self) -> Any:
        """The column of each non-zero value."""

    @property
    def indptr(self) -> Any:
        """Where each row's values start in `data`, and, last, their count."""


def _csr_attrs(data: Any, indices: Any, indptr: Any, output_cols: Any) -> dict[str, Any]:
    """The op's description of the sparse matrix, checked: plain tuples, so that attrs compare by value."""
    nz = np.asarray(data, dtype=np.float32).reshape(-1)
    cols = np.asarray(indices).reshape(-1)
    rows = np.asarray(indptr).reshape(-1)
    if isinstance(output_cols, bool) or not isinstance(output_cols, int | np.integer) or int(output_cols) < 1:
        raise ValueError(f"dense_const_sparse_matmul: output_cols must be a positive integer, got {output_cols!r}")
    n = int(output_cols)
    if not np.issubdtype(cols.dtype, np.integer) or not np.issubdtype(rows.dtype, np.integer):
        raise ValueError("dense_const_sparse_matmul: the CSR indices and indptr must be integers")
    if rows.size < 2 or rows[0] != 0 or np.any(np.diff(rows) < 0) or rows[-1] != nz.size:
        raise ValueError(
            "dense_const_sparse_matmul: the CSR indptr must rise from 0 to the number of non-zero values "
            f"({nz.size}), one entry per row and one more, got {rows.tolist()}"
        )
    if cols.size != nz.size:
        raise ValueError(f"dense_const_sparse_matmul: {nz.size} CSR values but {cols.size} column indices")
    if cols.size and (cols.min() < 0 or cols.max() >= n):
        raise ValueError(f"dense_const_sparse_matmul: CSR column indices must be in [0, {n}), got {cols.tolist()}")
    return {
        "nz": tuple(float(v) for v in nz),
        "cols": tuple(int(c) for c in cols),
        "rows": tuple(int(r) for r in rows),
        "output_cols": n,
    }


def _normalise(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> dict[str, Any]:
    return _csr_attrs(attrs["nz"], attrs["cols"], attrs["rows"], attrs["output_cols"])


def _infer(specs: Sequence[popxl.TensorSpec], attrs: Attrs) -> list[popxl.TensorSpec]:
    (lhs,) = specs
    if lhs.dtype not in (popxl.float16, popxl.float32):
        raise RuntimeError(f"dense_const_sparse_matmul: dtype {lhs.dtype} not currently supported (float16, float32)")
    if len(lhs.shape) not in (2, 3) or (len(lhs.shape) == 3 and lhs.shape[0] != 1):
        raise ValueError(f"dense_const_sparse_matmul: the dense lhs must be (m, k) or (1, m, k), got {lhs.shape}")
    k = len(attrs["rows"]) - 1
    if lhs.shape[-1] != k:
        raise ValueError(f"dense_const_sparse_matmul: lhs {lhs.shape} does not match the sparse rhs's {k} rows")
    return [popxl.TensorSpec((*lhs.shape[:-1], attrs["output_cols"]), lhs.dtype)]


def _dense(attrs: Attrs) -> np.ndarray[Any, Any]:
    """The described sparse matrix as a dense float32 array."""
    rows = np.asarray(attrs["rows"])
    out = np.zeros((rows.size - 1, attrs["output_cols"]), np.float32)
    row_of = np.repeat(np.arange(rows.size - 1), np.diff(rows))
    # Summed, as a CSR matrix with a repeated (row, column) entry means.
    np.add.at(out, (row_of, np.asarray(attrs["cols"], dtype=np.int64)), np.asarray(attrs["nz"], np.float32))
    return out


def _lower(ctx: LoweringContext, attrs: Attrs, lhs: Any) -> list[Any]:
    # The non-zero values are held in lhs's type on the device, as popxl-addons does.
    rhs = jnp.asarray(_dense(attrs)).astype(lhs.dtype)
    out = jnp.matmul(lhs, rhs, preferred_element_type=jnp.float32)
    return [out.astype(lhs.dtype)]


def _transposed(attrs: Attrs) -> dict[str, Any]:
    """The description of the transposed sparse matrix."""
    rows = np.asarray(attrs["rows"])
    k = rows.size - 1
    row_of = np.repeat(np.arange(k), np.diff(rows))
    cols = np.asarray(attrs["cols"], dtype=np.int64)
    order = np.lexsort((row_of, cols))  # by column, then row: the transpose's rows in order
    indptr = np.concatenate([[0], np.cumsum(np.bincount(cols, minlength=attrs["output_cols"]))])
    return _csr_attrs(np.asarray(attrs["nz"])[order], row_of[order], indptr, k)


def _grad(gb: GradBuilder, op: Op, out_grads: Sequence[popxl.Tensor | None]) -> list[popxl.Tensor | None]:
    dy = out_grads[0]
    if dy is None:
        return [None]
    return [create_op(DENSE_SPARSE_MATMUL, [dy], _transposed(op.attrs), names=["sparse_matmul_grad_out"])[0]]


DENSE_SPARSE_MATMUL = register(
    OpDef(
        "dense_const_sparse_matmul",
        _infer,
        _lower,
        grad=_grad,
        normalise=_normalise,
        output_names=("sparse_matmul_out",),
        departure="popxl-addons' custom op (no popxl op): the dense product; gradient: dy @ S^T (popxl-addons: none)",
    )
)


def dense_const_sparse_matmul(lhs: popxl.Tensor, rhs: CSRMatrix, output_cols: int) -> popxl.Tensor:
    """`lhs @ S` for `lhs` `(m, k)` or `(1, m, k)` (float16 or float32) and the constant sparse `(k, output_cols)`
    matrix `S` that the CSR matrix `rhs` describes (a `scipy.sparse.csr_matrix`, or any object with its `data`,
    `indices` and `indptr`)."""
    attrs = _csr_attrs(rhs.data, rhs.indices, rhs.indptr, output_cols)
    return create_op(DENSE_SPARSE_MATMUL, [lhs], attrs)[0]


def random_sparse(dense: np.ndarray[Any, Any], density: float = 0.5) -> np.ndarray[Any, Any]:
    """`dense` with each element zeroed in place with probability `1 - density`, at least one kept; returned."""
    if not 0.0 <= density <= 1.0:
        raise ValueError(f"random_sparse: density must be in [0, 1], got {density}")
    # Bernoulli draws from NumPy's global state, the same numbers as scipy.stats.bernoulli.rvs gives.
    mask = np.random.binomial(1, 1 - density, size=dense.shape).astype(np.bool_)
    if np.all(mask):
        mask.reshape(-1)[0] = False
    dense[mask] = 0
    return dense
