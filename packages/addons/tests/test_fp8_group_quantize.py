"""popxl-addons' float8 scale choices and 4-bit group quantisation against NumPy and JAX written directly."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import popxl
import popxl_addons as addons
from popxl.op import REGISTRY
from popxl.op_contract import OpExample, check_op, float16_errors
from popxl_addons.core import (
    fp8_amax_scale,
    fp8_mse_scale,
    group_quantize_compress_numpy,
    group_quantize_decompress,
    group_quantize_decompress_numpy,
)

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(21)
FORMATS = [popxl.float8_143, popxl.float8_152]
SOURCES = [np.float16, np.float32]
# (smallest exponent with denormals, largest exponent, mantissa bits, largest value) of each float8 format.
FP8 = {popxl.float8_143: (-10, 7, 3, 240.0), popxl.float8_152: (-17, 15, 2, 57344.0)}


def _run(build: Callable[[], list[popxl.Tensor]]) -> list[Array]:
    ir = popxl.Ir()
    with ir.main_graph:
        streams = [addons.host_store(t) for t in build()]
    with popxl.Session(ir, "cpu") as session:
        result = session.run()
    return [np.asarray(result[s]) for s in streams]


def _scales_on_device(fn: Callable[..., popxl.Tensor], sources: list[Array]) -> dict[tuple[int, popxl.dtype], int]:
    """`fn(source, format)` for each source and float8 format, by (source index, format), from one session."""
    keys = [(i, fmt) for i in range(len(sources)) for fmt in FORMATS]
    outs = _run(lambda: [fn(popxl.variable(sources[i]), fmt) for i, fmt in keys])
    assert all(out.shape == () and out.dtype == np.int32 for out in outs)
    return {key: int(out) for key, out in zip(keys, outs)}


# ---- the reference maths, written directly --------------------------------------------------------------------


def _np_ipu_mse_scale(src: Array, fmt: popxl.dtype) -> int:
    """popxl-addons' IPU op, step by step in float32: a log2 histogram, then 62 candidates' squared errors."""
    min_exp, max_exp, mantissa, _ = FP8[fmt]
    span = max_exp - min_exp + 1
    lowest = min_exp - 31 + 126
    q = np.float32(2.0 ** (-2 * (10 - mantissa)))
    edges = [np.float32(2.0**k) for k in range(-126, 128)]
    hist = np.zeros(254, np.float32)
    for v in np.abs(src.astype(np.float32)).ravel():
        if np.isinf(v):
            hist[253] += 1
        elif v >= edges[0]:
            _, e = np.frexp(v)
            hist[min(int(e) + 125, 253)] += 1
    hist = hist / np.float32(src.size)
    mse = []
    for b in range(62):
        lo, hi = lowest + b, lowest + b + span
        top = edges[hi - 1]
        acc = np.float32(0)
        for j in range(1, 254):
            h, edge = hist[j], edges[j]
            if j < lo:
                acc = acc + h * edge * edge
            elif j < hi:
                acc = acc + h * edge * edge * q
            else:
                acc = acc + h * (top - edge) * (top - edge)
        mse.append(acc)
    best = min(mse)
    return 31 - (mse.index(best) + mse.count(best) // 2)


def popart_host_mse_scale(src: Array, fmt: popxl.dtype) -> tuple[float, int]:
    """popart's host `popxl.fp8_utils.host_fp8_mse_scale`, in float64: (lowest cost, scale) over 63 candidates."""
    min_exp, max_exp, mantissa, _ = FP8[fmt]
    span = max_exp - min_exp + 1
    edges = [2.0**k for k in range(-126, 127)]
    hist = np.zeros(len(edges) + 1)
    for v in np.asarray(src).ravel():
        a = math.fabs(float(v))
        if a < edges[0]:
            hist[0] += 1
        elif a > edges[-1]:
            hist[-1] += 1
        else:
            hist[int(np.frexp(a)[1]) + 125 + 1] += 1
    hist /= hist.sum()
    q = 2.0 ** (-2.0 * ((23 if np.asarray(src).dtype == np.float32 else 10) - mantissa))
    lowest = max(min_exp - 31 + 126, 0)
    costs: dict[float, list[int]] = defaultdict(list)
    for index in range(63):
        first = lowest + index
        cost = 0.0
        for i in range(first):
            cost += (edges[0] / 2) ** 2 if i == 0 else 0.0
            cost += edges[i] ** 2 * hist[i + 1]
        for i in range(first, min(first + span, len(edges))):
            cost += edges[i] ** 2 * hist[i + 1] * q
        for i in range(first + span, len(edges)):
            cost += (edges[index + span - 1] - edges[i]) ** 2 * hist[i + 1]
        costs[cost].append(index - 31)
    best = min(costs)
    ties = sorted(costs[best])
    return best, -ties[len(ties) // 2]


def _np_amax_scale(src: Array, fmt: popxl.dtype) -> int:
    """floor(log(max_value / max|src|) / log(2)) in float32, clipped to [-31, 31]."""
    with np.errstate(divide="ignore"):
        ratio = np.float32(FP8[fmt][3]) / np.abs(src).max().astype(np.float32)
    log2 = np.log(ratio) / np.log(np.float32(2))
    return int(np.clip(np.floor(log2), -31, 31))


def _np_pack(t: Array, group_size: int) -> tuple[Array, Array, Array]:
    """4-bit group quantisation of `t` along its last axis, word by word: FlexGen's packing as popxl-addons has it."""
    rows = t.reshape(-1, t.shape[-1])
    n_groups = t.shape[-1] // group_size
    packed = np.zeros((rows.shape[0], n_groups, group_size // 4), np.uint16)
    scales = np.zeros((rows.shape[0], n_groups, 1), np.float16)
    biases = np.zeros((rows.shape[0], n_groups, 1), np.float16)
    for r, row in enumerate(rows):
        for g in range(n_groups):
            group = row[g * group_size : (g + 1) * group_size]
            hi, lo = np.float16(group.max()), np.float16(group.min())
            scale = np.float16(np.float16(hi - lo) / np.float16(15))
            scales[r, g, 0], biases[r, g, 0] = scale, lo
            for w in range(group_size // 4):
                word = 0
                for v in group[4 * w : 4 * w + 4]:
                    q = 0 if scale == 0 else int(np.clip(np.round((v - lo) / scale), 0, 15))
                    word = word * 16 + q
                packed[r, g, w] = word
    lead = t.shape[:-1]
    return (
        packed.reshape(*lead, n_groups, -1),
        scales.reshape(*lead, n_groups, 1),
        biases.reshape(*lead, n_groups, 1),
    )


def _np_unpack(packed: Array, scale: Array, bias: Array) -> Array:
    """`id * scale + bias` for the four ids of each word, top nibble first, in the scales' type."""
    ids = np.zeros((*packed.shape[:-1], packed.shape[-1] * 4), np.uint16)
    for k in range(4):
        ids[..., k::4] = (packed // 16 ** (3 - k)) % 16
    out = ids.astype(scale.dtype) * scale + bias
    return out.reshape(*packed.shape[:-2], -1)


# ---- the registry sweep, for this package's op kinds ----------------------------------------------------------


def _mse_example(ir: popxl.Ir) -> OpExample:
    src = (RNG.normal(size=(4, 6)) * 5).astype(np.float32)
    attrs = {"min_fp32_exp_index": 85, "format_span": 18, "quantisation_error": 2.0**-14}
    return OpExample(
        [src], attrs, reference=lambda x: [jnp.asarray(_np_ipu_mse_scale(np.asarray(x), popxl.float8_143), jnp.int32)]
    )


def _gq_example(ir: popxl.Ir) -> OpExample:
    packed = RNG.integers(0, 2**16, size=(3, 2, 4)).astype(np.uint16)
    scale = RNG.uniform(0.01, 0.2, size=(3, 2, 1)).astype(np.float32)
    bias = RNG.normal(size=(3, 2, 1)).astype(np.float32)

    def reference(t: Any, s: Any, b: Any) -> list[Any]:
        return [jnp.asarray(_np_unpack(np.asarray(t), np.asarray(s), np.asarray(b)))]

    return OpExample([packed, scale, bias], {}, reference=reference)


EXAMPLES: dict[str, Callable[[popxl.Ir], OpExample]] = {
    "fp8_mse_scale": _mse_example,
    "group_quantize_decompress": _gq_example,
}


def test_every_op_kind_of_these_modules_has_an_example() -> None:
    modules = {"popxl_addons.core.ops.fp8_scale", "popxl_addons.core.ops.group_quantize"}
    ours = {name for name, opdef in REGISTRY.items() if opdef.lower.__module__ in modules}
    assert ours == set(EXAMPLES)
    assert all(REGISTRY[name].grad is None for name in ours)  # popxl-addons' ops have no gradient


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_registry_declarations(kind: str) -> None:
    check_op(REGISTRY[kind], EXAMPLES[kind])


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_float16_close_to_float32(kind: str) -> None:
    for scale, per_result in float16_errors(REGISTRY[kind], EXAMPLES[kind]).items():
        for label, error in per_result.items():
            assert error < 1e-2, f"{label} at std {scale}: {error}"


# ---- fp8 scales --------------------------------------------------------------------------------------------------


def _sources(dtype: type) -> list[Array]:
    """Evenly spread data at several magnitudes, and popxl-addons' test data."""
    np.random.seed(0)
    cases = [np.random.uniform(-(2**5), -(2**6), 10)]
    cases += [RNG.normal(size=200) * std for std in (1e-3, 0.02, 1.0, 3.0, 300.0)]
    cases += [RNG.uniform(-1, 1, size=(8, 16)) * 50]
    return [c.astype(dtype) for c in cases]


@pytest.mark.parametrize("dtype", SOURCES)
def test_fp8_mse_scale(dtype: type) -> None:
    sources = _sources(dtype)
    for (i, fmt), got in _scales_on_device(fp8_mse_scale, sources).items():
        # Exact on any processor: the device and the NumPy reference make the same float32 operations in the
        # same order (each bin's share by one division, its terms by products and one subtraction of edges,
        # then a sequential sum of the precomputed terms), each rounded by IEEE rules: no multiply feeds an add
        # to be fused, no sum is reordered, and no term here is small enough for XLA's flushing of subnormals.
        assert got == _np_ipu_mse_scale(sources[i], fmt)
        # On evenly spread data popxl-addons' op and popart's host search agree.
        assert got == popart_host_mse_scale(sources[i], fmt)[1]


def test_fp8_mse_scale_extremes() -> None:
    """Magnitudes beyond float8's reach at the ends of float32's range, and zeros (not weighed)."""
    cases = [np.full(7, 1e-30), np.full(5, 1e30), np.array([0.0, 0.0, 1e-3, 2.0, 0.0]), np.zeros(4)]
    sources = [c.astype(np.float32) for c in cases]
    with np.errstate(over="ignore"):
        for (i, fmt), got in _scales_on_device(fp8_mse_scale, sources).items():
            assert got == _np_ipu_mse_scale(sources[i], fmt) and -30 <= got <= 31


@pytest.mark.parametrize("dtype", SOURCES)
def test_fp8_amax_scale(dtype: type) -> None:
    sources = _sources(dtype)
    for (i, fmt), got in _scales_on_device(fp8_amax_scale, sources).items():
        largest = float(np.abs(sources[i]).max())
        ideal = math.log2(FP8[fmt][3] / largest)
        nearest = round(ideal)
        # The float32 logs (XLA's on the device, NumPy's here) are each off by a few ulps, which differ by
        # processor: their quotient is within about 1e-5 of the log2 (at most 31). Its floor is the exact
        # log2's unless that lies within 1e-4 of an integer (as on a power of two), where either side may win.
        if abs(ideal - nearest) > 1e-4:
            assert got == math.floor(ideal) == _np_amax_scale(sources[i], fmt)
        else:
            assert got in (nearest - 1, nearest)
        # The scaled largest magnitude fits the format (to that 1e-4 next to a power of two).
        assert largest * 2.0**got <= FP8[fmt][3] * (1 + 1e-4)


def test_fp8_amax_scale_is_clipped() -> None:
    sources = [np.zeros(3, np.float32), np.full(3, 1e30, np.float32), np.full(3, 1e-30, np.float32)]
    got = _scales_on_device(fp8_amax_scale, sources)
    assert [got[i, fmt] for i in range(3) for fmt in FORMATS] == [31, 31, -31, -31, 31, 31]


def test_fp8_scales_refuse_bad_arguments() -> None:
    with popxl.Ir().main_graph:
        ints = popxl.variable(np.ones(3, np.int32))
        floats = popxl.variable(np.ones(3, np.float32))
        for fn in (fp8_mse_scale, fp8_amax_scale):
            with pytest.raises(RuntimeError, match=r"must be float16 or float32, got popxl\.int32"):
                fn(ints, popxl.float8_143)
            with pytest.raises(TypeError, match=r"float8_143 or popxl\.float8_152, got popxl\.float16"):
                fn(floats, popxl.float16)
        with pytest.raises(ValueError, match="non-empty"):
            fp8_mse_scale(popxl.variable(np.ones((0, 2), np.float32)))


# ---- group quantisation ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", SOURCES)
@pytest.mark.parametrize(("shape", "dim", "group_size"), [((6, 32), -1, 8), ((5, 32), 0, 16), ((2, 3, 16), 1, 4)])
def test_compress_packs_as_flexgen(dtype: type, shape: tuple[int, ...], dim: int, group_size: int) -> None:
    """`shape` has the quantised axis last; `t` has it at `dim`."""
    last: Array = (RNG.normal(size=shape) * 2).astype(dtype)
    last.reshape(-1, shape[-1])[0, :group_size] = 0.5  # one constant group: scale 0, every id 0
    t = np.moveaxis(last, -1, dim)
    packed, scale, bias = group_quantize_compress_numpy(t, group_size, dim=dim)
    want = _np_pack(last, group_size)
    # NumPy on both sides, the same IEEE operations in the same order (NumPy fuses nothing): equal on any machine.
    for got, expected in zip((packed, scale, bias), want):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
    restored = group_quantize_decompress_numpy(packed, scale, bias, dim=dim)
    assert restored.shape == t.shape
    np.testing.assert_array_equal(np.moveaxis(restored, dim, -1), _np_unpack(*want))
    # Each value comes back within half a step of its group's grid (and float16 rounding).
    step = np.repeat(scale[..., 0], group_size, axis=-1).astype(np.float32)
    error = np.abs(np.moveaxis(restored, dim, -1).astype(np.float32) - last.astype(np.float32))
    assert (error <= step / 2 + np.abs(last).astype(np.float32) * 2e-3).all()
    np.testing.assert_array_equal(np.moveaxis(restored, dim, -1).reshape(-1, shape[-1])[0, :group_size], 0.5)


@pytest.mark.parametrize("dtype", [popxl.float16, popxl.float32])
@pytest.mark.parametrize("dim", [-1, 0])
def test_group_quantize_decompress_on_device(dtype: popxl.dtype, dim: int) -> None:
    packed = RNG.integers(0, 2**16, size=(5, 3, 4)).astype(np.uint16)
    scale = RNG.uniform(0.01, 0.3, size=(5, 3, 1)).astype(dtype.as_numpy())
    bias = RNG.normal(size=(5, 3)).astype(dtype.as_numpy())  # rank 2: popxl-addons adds the last axis
    (out,) = _run(
        lambda: [group_quantize_decompress(popxl.variable(packed), popxl.variable(scale), popxl.variable(bias), dim)]
    )
    assert out.dtype == dtype.as_numpy()
    # `id * scale` is exact in float64 (a 4-bit id times an 11- or 24-bit scale), and so, to far below float32's
    # precision, is `id * scale + bias`.
    scale64, bias64 = scale.astype(np.float64), bias[..., None].astype(np.float64)
    product, exact = _np_unpack(packed, scale64, np.zeros_like(bias64)), _np_unpack(packed, scale64, bias64)
    if dim == 0:
        product, exact = product.T, exact.T
    # The device rounds to `dtype` once (a fused multiply-add, or float16 arithmetic carried in float32) or twice
    # (the product, then the sum, as NumPy does), as the processor has it. A rounding is off by at most u times
    # what it rounds (u = 2**-11 for float16, 2**-24 for float32: half an ulp of 1), so the result is within
    # u * (1 + u) * (|product| + |exact|) of the exact value; the smallest normal covers results in the subnormal
    # range (XLA flushes float32 subnormals to zero). A wrong id moves a value by a whole scale, at least 0.01:
    # beyond this bound, which is at most about 0.006 for float16 and 1e-6 for float32.
    info = np.finfo(dtype.as_numpy())
    u = float(info.eps) / 2
    bound = u * (1 + u) * (np.abs(product) + np.abs(exact)) + float(info.smallest_normal)
    error = np.abs(out.astype(np.float64) - exact)
    assert (error <= bound).all(), (
        f"{int((error > bound).sum())} of {error.size} values beyond the bound: {error.max()}"
    )


def test_group_quantize_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        group_quantize_compress_numpy(np.array([[1.0, np.nan, 0.0, 2.0]]), 4)
    with pytest.raises(ValueError, match=r"positive multiple of 4 that divides the quantised axis \(8\), got 6"):
        group_quantize_compress_numpy(np.zeros((2, 8)), 6)
    with pytest.raises(ValueError, match="more than float16's range"):
        group_quantize_compress_numpy(np.array([[1e6, 0.0, 0.0, 0.0]]), 4)
    with popxl.Ir().main_graph:
        words = popxl.variable(np.zeros((2, 3, 4), np.uint16))
        scale = popxl.variable(np.zeros((2, 3, 1), np.float16))
        with pytest.raises(NotImplementedError, match="rank 3"):
            group_quantize_decompress(popxl.variable(np.zeros((2, 12), np.uint16)), scale, scale)
        with pytest.raises(TypeError, match=r"must be uint16, got popxl\.int32"):
            group_quantize_decompress(popxl.variable(np.zeros((2, 3, 4), np.int32)), scale, scale)
        with pytest.raises(ValueError, match=r"group_bias must have shape \(2, 3, 1\), got \(2, 4, 1\)"):
            group_quantize_decompress(words, scale, popxl.variable(np.zeros((2, 4, 1), np.float16)))
        with pytest.raises(TypeError, match="share a type"):
            group_quantize_decompress(words, scale, popxl.variable(np.zeros((2, 3, 1), np.float32)))
