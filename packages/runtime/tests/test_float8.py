"""popxl's float8: host conversions, float8 variables and streams, and the log2-scale range check."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.fp8_utils import host_fp8_mse_scale, host_pow2scale_cast_from_fp8, host_pow2scale_cast_to_fp8

X = np.array([0.5, -1.25, 3.0, 100.0, 1e-3, 500.0], np.float32)


@pytest.mark.parametrize(
    ("dtype", "ml_type"),
    [(popxl.float8_143, ml_dtypes.float8_e4m3fnuz), (popxl.float8_152, ml_dtypes.float8_e5m2fnuz)],
)
def test_host_casts_are_graphcores_fp8_bytes(dtype: popxl.dtype, ml_type: type) -> None:
    got = host_pow2scale_cast_to_fp8(X, dtype, log2_scale=-1)
    assert got.dtype == np.dtype([(dtype.name, "u1")])
    want = (X.astype(np.float64) / 2).astype(ml_type)
    # A power-of-two scale is exact: each side rounds once, to the nearest float8, ties to even.
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
    # The variable's float8 bytes are the host's cast (the same rounding of a * 2), written and read back.
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


@pytest.mark.parametrize(("dtype", "target_mantissa", "middle"), [(popxl.float8_143, 3, -2), (popxl.float8_152, 2, -1)])
@pytest.mark.parametrize(("source", "source_mantissa"), [(np.float16, 10), (np.float32, 23)])
@pytest.mark.parametrize("k", [-9, 0, 5])
def test_host_mse_scale_of_one_binade_is_the_middle_of_the_tied_scales(
    dtype: popxl.dtype, target_mantissa: int, middle: int, source: type, source_mantissa: int, k: int
) -> None:
    """Magnitudes in one binade [2**k, 2**(k+1)) fit every scale that puts the binade in the format's
    exponent range equally well (error: the binade's lower edge squared times the quantisation error), and
    popxl takes the middle of those: 2**(k + s) lands at the middle exponent (-2 of -10..7 for 1.4.3, -1 of
    -17..15 for 1.5.2)."""
    values = np.random.default_rng(k + 20).uniform(2.0**k, 2.0 ** (k + 1), 64) * np.where(np.arange(64) % 2, 1, -1)
    error, scale = host_fp8_mse_scale(values.astype(source), dtype)
    assert scale == middle - k
    quantisation = 2.0 ** (-2 * (source_mantissa - target_mantissa))
    assert error == pytest.approx(4.0**k * quantisation, rel=1e-12)


def test_host_mse_scale_weighs_overflow_and_underflow() -> None:
    """Half the values at 2**0 and half at 2**30: no scale holds both in 1.4.3's 18 binades, and the error
    of losing the small half (edge 1) is far below that of overflowing the large one, so the large half sits
    inside the range."""
    values = np.array([1.0] * 8 + [2.0**30] * 8, np.float32)
    error, scale = host_fp8_mse_scale(values, popxl.float8_143)
    assert 2.0 ** (30 + scale) <= 2.0**7 and 2.0 ** (0 + scale) < 2.0**-10
    # The small half's squared edge (1) and the large half's quantisation error, each weighed by its share.
    assert error == pytest.approx(0.5 * 1.0 + 0.5 * 4.0**30 * 2.0 ** (-2 * (23 - 3)), rel=1e-12)


def test_host_mse_scale_refuses_other_source_types() -> None:
    with pytest.raises(RuntimeError, match="dtype int32 not currently supported"):
        host_fp8_mse_scale(np.zeros(4, np.int32), popxl.float8_143)
