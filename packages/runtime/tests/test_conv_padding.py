"""ONNX's automatic padding and ConvTranspose's output_shape, against `jax.lax` convolutions with explicit pads."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax import lax
from runtime_helpers import run_main

import popxl
from popxl import ops

RNG = np.random.default_rng(5)
X = RNG.normal(size=(2, 3, 5, 7)).astype(np.float32)
W = RNG.normal(size=(4, 3, 4, 3)).astype(np.float32)


def _lax_conv(x: np.ndarray, w: np.ndarray, stride: tuple[int, int], pads: list[tuple[int, int]]) -> np.ndarray:
    return np.asarray(lax.conv_general_dilated(x, w, stride, pads))


@pytest.mark.parametrize(
    ("pad_type", "pads"),
    [
        # Height 5, kernel 4, stride 2: 3 outputs need 3 pixels of padding; width 7, kernel 3, stride 2: 2 pixels.
        ("same_upper", [(1, 2), (1, 1)]),
        ("same_lower", [(2, 1), (1, 1)]),
        ("valid", [(0, 0), (0, 0)]),
    ],
)
def test_conv_auto_pad(pad_type: str, pads: list[tuple[int, int]]) -> None:
    def build() -> dict[str, popxl.Tensor]:
        return {"y": ops.conv(popxl.constant(X), popxl.constant(W), (2, 2), pad_type=pad_type)}

    got = run_main(build)["y"]
    np.testing.assert_allclose(got, _lax_conv(X, W, (2, 2), pads), rtol=1e-5, atol=1e-5)


def test_conv_transpose_output_shape_sets_onnx_pads() -> None:
    x = RNG.normal(size=(1, 4, 3, 3)).astype(np.float32)
    w = RNG.normal(size=(4, 2, 3, 3)).astype(np.float32)

    def build() -> dict[str, popxl.Tensor]:
        return {"y": ops.conv_transpose(popxl.constant(x), popxl.constant(w), (2, 2), output_shape=(6, 5))}

    got = run_main(build)["y"]
    # ONNX: total padding 2*(3-1) + 3 - out = (1, 2); not same_upper, so the odd pixel goes first: (1, 0) and (1, 1).
    # A transposed convolution is the VJP of the convolution with those pads.
    z = np.zeros((1, 2, 6, 5), np.float32)
    _, pullback = jax.vjp(lambda v: lax.conv_general_dilated(v, w, (2, 2), [(1, 0), (1, 1)]), z)
    assert got.shape == (1, 2, 6, 5)
    np.testing.assert_allclose(got, np.asarray(pullback(x)[0]), rtol=1e-5, atol=1e-5)


def test_bad_shapes_are_named() -> None:
    with popxl.Ir().main_graph:
        with pytest.raises(ValueError, match=r"conv: weight \(4, 2, 4, 3\) does not fit input \(2, 3, 5, 7\)"):
            ops.conv(popxl.constant(X), popxl.constant(W[:, :2]))
        with pytest.raises(ValueError, match="pad_type must be one of"):
            ops.conv(popxl.constant(X), popxl.constant(W), pad_type="same")
        with pytest.raises(ValueError, match="window does not fit"):
            ops.max_pool(popxl.constant(X), (6, 2))
