"""popxl's float8: host conversions, float8 variables and streams, and the log2-scale range check."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.fp8_utils import host_pow2scale_cast_from_fp8, host_pow2scale_cast_to_fp8

X = np.array([0.5, -1.25, 3.0, 100.0, 1e-3, 500.0], np.float32)


@pytest.mark.parametrize(
    ("dtype", "ml_type"),
    [(popxl.float8_143, ml_dtypes.float8_e4m3fnuz), (popxl.float8_152, ml_dtypes.float8_e5m2fnuz)],
)
def test_host_casts_are_graphcores_fp8_bytes(dtype: popxl.dtype, ml_type: type) -> None:
    got = host_pow2scale_cast_to_fp8(X, dtype, log2_scale=-1)
    assert got.dtype == np.dtype([(dtype.name, "u1")])
    want = (X.astype(np.float64) / 2).astype(ml_type)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    back = host_pow2scale_cast_from_fp8(got, popxl.float32, log2_scale=1)
    np.testing.assert_array_equal(back, want.astype(np.float32) * 2)
    # Beyond the format's range: NaN, or the largest value without nan_on_overflow.
    big = np.array([1e9], np.float32)
    assert np.isnan(host_pow2scale_cast_from_fp8(host_pow2scale_cast_to_fp8(big, dtype), popxl.float32))[0]
    top = float(ml_dtypes.finfo(ml_type).max)
    clamped = host_pow2scale_cast_to_fp8(big, dtype, nan_on_overflow=False)
    assert host_pow2scale_cast_from_fp8(clamped, popxl.float32)[0] == top
    with pytest.raises(RuntimeError, match="log2_scale"):
        host_pow2scale_cast_to_fp8(X, dtype, log2_scale=40)


def test_float8_variables_streams_and_scaled_matmul() -> None:
    a = np.array([[1.0, 2.0], [0.5, -1.0]], np.float32)
    b = np.array([[3.0, 0.25], [-2.0, 1.5]], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        lhs = popxl.variable(a, popxl.float8_143, name="lhs", log2_scale=1)
        rhs_in = popxl.h2d_stream((2, 2), popxl.float8_152, "rhs")
        scale = popxl.constant(np.int32(-1), popxl.int32)
        product = ops.matmul_pow2scaled(lhs, ops.host_load(rhs_in), scale)
        out = popxl.d2h_stream((2, 2), popxl.float16, "out")
        ops.host_store(out, product)
        cast = popxl.d2h_stream((2, 2), popxl.float8_143, "cast")
        ops.host_store(cast, ops.pow2scale_cast_to_fp8(product, popxl.constant(np.int32(0)), popxl.float8_143))
    with popxl.Session(ir, "cpu") as s:
        got = s.run({rhs_in: host_pow2scale_cast_to_fp8(b, popxl.float8_152)})
        stored = s.get_tensor_data(lhs)
    np.testing.assert_allclose(got[out], (2 * a) @ b / 2, rtol=1e-3)
    assert got[cast].dtype == np.dtype([("float8_143", "u1")])
    np.testing.assert_array_equal(stored, host_pow2scale_cast_to_fp8(a, popxl.float8_143, 1))


@pytest.mark.parametrize("throw", [True, False])
def test_log2_scale_out_of_range(throw: bool) -> None:
    ir = popxl.Ir()
    ir.session_options.throwIfLog2ScaleTensorNotInRange = throw
    with ir.main_graph:
        scale_in = popxl.h2d_stream((), popxl.int32, "scale")
        out = popxl.d2h_stream((2,), popxl.float32, "out")
        x = popxl.constant(host_pow2scale_cast_to_fp8(np.array([1.0, 2.0]), popxl.float8_143))
        ops.host_store(out, ops.pow2scale_cast_from_fp8(x, ops.host_load(scale_in), popxl.float32))
    with popxl.Session(ir, "cpu") as s:
        np.testing.assert_array_equal(s.run({scale_in: np.int32(2)})[out], [4.0, 8.0])
        if throw:
            with pytest.raises(popxl.OutOfRangeError, match="log2_scale 100, outside"):
                s.run({scale_in: np.int32(100)})
        else:
            np.testing.assert_array_equal(s.run({scale_in: np.int32(100)})[out], [2.0**31, 2.0**32])
