"""Convolutions and pooling over channels-first tensors (N, C, *spatial), with ONNX's padding rules as popart has them.

Explicit pads are `[begin_0, begin_1, ..., end_0, end_1, ...]`. `auto_pad`
("same_upper", "same_lower", "valid") is resolved to explicit pads by the
shape rule, so lowerings only ever see explicit ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from popxl.op import Attrs, OpDef, PopartFacts, register
from popxl.opdefs.common import vjp_grad
from popxl.tensor import TensorSpec

PAD_TYPES = ("not_set", "same_upper", "same_lower", "valid")


def _ints(name: str, value: Sequence[int] | None, n: int, default: int) -> tuple[int, ...]:
    if value is None or len(value) == 0:
        return (default,) * n
    if len(value) != n:
        raise ValueError(f"{name} needs {n} values, one per spatial axis, got {tuple(value)}")
    return tuple(int(v) for v in value)


def _spatial(op: str, s: TensorSpec, least: int = 1) -> int:
    if len(s.shape) < 2 + least:
        raise ValueError(f"{op} needs an (N, C, *spatial) input with at least {least} spatial axis, got {s.shape}")
    return len(s.shape) - 2


def _auto_pads(
    pad_type: str, sizes: Sequence[int], kernels: Sequence[int], strides: Sequence[int], pads: tuple[int, ...]
) -> tuple[int, ...]:
    """Explicit pads for `pad_type`: 'same_*' keeps `ceil(size / stride)` outputs, an odd pixel at the end for
    'same_upper' and at the beginning for 'same_lower'."""
    if pad_type not in PAD_TYPES:
        raise ValueError(f"pad_type must be one of {PAD_TYPES}, got {pad_type!r}")
    if pad_type == "not_set":
        return pads
    n = len(sizes)
    if pad_type == "valid":
        return (0,) * (2 * n)
    totals = [max((-(-x // s) - 1) * s + k - x, 0) for x, k, s in zip(sizes, kernels, strides)]
    small = [t // 2 for t in totals]
    large = [t - t // 2 for t in totals]
    return tuple(small + large) if pad_type == "same_upper" else tuple(large + small)


def _window_outputs(
    sizes: Sequence[int], kernels: Sequence[int], strides: Sequence[int], pads: Sequence[int]
) -> list[int]:
    n = len(sizes)
    out = [(x + pads[i] + pads[n + i] - k) // s + 1 for i, (x, k, s) in enumerate(zip(sizes, kernels, strides))]
    if any(o < 1 for o in out):
        raise ValueError(f"The window does not fit: spatial sizes {tuple(sizes)}, effective kernel {tuple(kernels)}")
    return out


def _conv_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    x, w = specs
    n = _spatial("conv", x)
    groups = int(attrs["groups"])
    if len(w.shape) != n + 2 or x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
        raise ValueError(
            f"conv: weight {w.shape} does not fit input {x.shape} with groups={groups}: "
            f"expected (M, C/groups, *kernel) with M divisible by groups"
        )
    stride = _ints("stride", attrs["stride"], n, 1)
    dilation = _ints("dilation", attrs["dilation"], n, 1)
    kernels = [(k - 1) * d + 1 for k, d in zip(w.shape[2:], dilation)]
    pads = _ints("padding", attrs["padding"], 2 * n, 0)
    pads = _auto_pads(attrs.get("pad_type", "not_set"), x.shape[2:], kernels, stride, pads)
    return {"stride": stride, "padding": pads, "dilation": dilation, "groups": groups}


def _conv_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    x, w = specs
    kernels = [(k - 1) * d + 1 for k, d in zip(w.shape[2:], attrs["dilation"])]
    out = _window_outputs(x.shape[2:], kernels, attrs["stride"], attrs["padding"])
    return [TensorSpec((x.shape[0], w.shape[0], *out), x.dtype)]


def _pairs(pads: Sequence[int]) -> list[tuple[int, int]]:
    n = len(pads) // 2
    return [(pads[i], pads[n + i]) for i in range(n)]


def _conv_lower(ctx: Any, attrs: Attrs, x: jax.Array, w: jax.Array) -> list[jax.Array]:
    out = lax.conv_general_dilated(
        x,
        w.astype(x.dtype),
        window_strides=attrs["stride"],
        padding=_pairs(attrs["padding"]),
        rhs_dilation=attrs["dilation"],
        feature_group_count=attrs["groups"],
        preferred_element_type=jnp.float32 if x.dtype == jnp.float16 else None,
    )
    return [out.astype(x.dtype)]


# popart's convolutions take one available memory proportion per convolution, which transforms may set.
_SETTINGS = frozenset({"available_memory_proportions"})

CONV = register(
    OpDef(
        "conv",
        _conv_infer,
        _conv_lower,
        grad=vjp_grad(),
        normalise=_conv_normalise,
        popart=PopartFacts(ipu_settings=_SETTINGS),
    )
)


def _conv_transpose_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    x, w = specs
    n = _spatial("conv_transpose", x)
    groups = int(attrs["groups"])
    if len(w.shape) != n + 2 or x.shape[1] != w.shape[0] or w.shape[0] % groups:
        raise ValueError(
            f"conv_transpose: weight {w.shape} does not fit input {x.shape} with groups={groups}: "
            "expected (C, M/groups, *kernel)"
        )
    stride = _ints("stride", attrs["stride"], n, 1)
    dilation = _ints("dilation", attrs["dilation"], n, 1)
    out_pad = _ints("output_padding", attrs["output_padding"], n, 0)
    kernels = [(k - 1) * d + 1 for k, d in zip(w.shape[2:], dilation)]
    pad_type = attrs.get("pad_type", "not_set")
    if pad_type not in PAD_TYPES:
        raise ValueError(f"pad_type must be one of {PAD_TYPES}, got {pad_type!r}")
    shape = tuple(attrs["output_shape"] or ())
    if pad_type in ("same_upper", "same_lower") and not shape:
        shape = tuple(xi * s for xi, s in zip(x.shape[2:], stride))
    if shape:
        # ONNX: pads from the requested output shape; the odd pixel goes to the end for same_upper only.
        totals = [s * (xi - 1) + op + k - o for xi, s, op, k, o in zip(x.shape[2:], stride, out_pad, kernels, shape)]
        if any(t < 0 for t in totals):
            raise ValueError(f"conv_transpose cannot produce output shape {shape} from input {x.shape}")
        if pad_type == "same_upper":
            pads = tuple([t // 2 for t in totals] + [t - t // 2 for t in totals])
        else:
            pads = tuple([t - t // 2 for t in totals] + [t // 2 for t in totals])
    elif pad_type == "valid":
        pads = (0,) * (2 * n)
    else:
        pads = _ints("padding", attrs["padding"], 2 * n, 0)
    return {"stride": stride, "padding": pads, "dilation": dilation, "groups": groups, "output_padding": out_pad}


def _conv_transpose_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    x, w = specs
    n = len(x.shape) - 2
    p = attrs["padding"]
    out = [
        s * (xi - 1) + op + (k - 1) * d + 1 - p[i] - p[n + i]
        for i, (xi, s, op, k, d) in enumerate(
            zip(x.shape[2:], attrs["stride"], attrs["output_padding"], w.shape[2:], attrs["dilation"])
        )
    ]
    if any(o < 1 for o in out):
        raise ValueError(f"conv_transpose of {x.shape} with weight {w.shape} gives no output: sizes {out}")
    return [TensorSpec((x.shape[0], w.shape[1] * attrs["groups"], *out), x.dtype)]


def _conv_transpose_lower(ctx: Any, attrs: Attrs, x: jax.Array, w: jax.Array) -> list[jax.Array]:
    g, n = attrs["groups"], x.ndim - 2
    c, m = w.shape[0], w.shape[1]
    # The transpose is a stride-1 convolution of the stride-dilated input with the flipped, regrouped kernel.
    kernel = w.reshape(g, c // g, m, *w.shape[2:]).swapaxes(1, 2).reshape(g * m, c // g, *w.shape[2:])
    kernel = jnp.flip(kernel, axis=tuple(range(2, 2 + n))).astype(x.dtype)
    pads = attrs["padding"]
    edges = [
        ((k - 1) * d - pads[i], (k - 1) * d - pads[n + i] + op)
        for i, (k, d, op) in enumerate(zip(w.shape[2:], attrs["dilation"], attrs["output_padding"]))
    ]
    out = lax.conv_general_dilated(
        x,
        kernel,
        window_strides=(1,) * n,
        padding=edges,
        lhs_dilation=attrs["stride"],
        rhs_dilation=attrs["dilation"],
        feature_group_count=g,
    )
    return [out.astype(x.dtype)]


CONV_TRANSPOSE = register(
    OpDef(
        "conv_transpose",
        _conv_transpose_infer,
        _conv_transpose_lower,
        grad=vjp_grad(),
        normalise=_conv_transpose_normalise,
        popart=PopartFacts(ipu_settings=_SETTINGS),
    )
)


def _pool_normalise(specs: Sequence[TensorSpec], attrs: Attrs) -> dict[str, Any]:
    (x,) = specs
    n = _spatial("pool", x)
    kernel = _ints("kernel_size", attrs["kernel_size"], n, 1)
    stride = _ints("stride", attrs["stride"], n, 1)
    dilation = _ints("dilation", attrs["dilation"], n, 1)
    in_dilation = _ints("in_dilations", attrs["in_dilations"], n, 1)
    sizes = [(xi - 1) * d + 1 for xi, d in zip(x.shape[2:], in_dilation)]
    kernels = [(k - 1) * d + 1 for k, d in zip(kernel, dilation)]
    pads = _ints("padding", attrs["padding"], 2 * n, 0)
    pads = _auto_pads(attrs.get("auto_pad", "not_set"), sizes, kernels, stride, pads)
    out = _window_outputs(sizes, kernels, stride, pads)
    if attrs["ceil_mode"]:
        # As PyTorch and ONNX: round the output count up, but never start a window in the end padding.
        out = [
            -(-(xi + pads[i] + pads[n + i] - k) // s) + 1 for i, (xi, k, s) in enumerate(zip(sizes, kernels, stride))
        ]
        out = [o - 1 if (o - 1) * s >= xi + pads[i] else o for i, (o, xi, s) in enumerate(zip(out, sizes, stride))]
    # Pads that close the last window, so that reduce_window yields exactly `out` windows.
    ends = [max((o - 1) * s + k - xi - pads[i], 0) for i, (o, xi, k, s) in enumerate(zip(out, sizes, kernels, stride))]
    return {
        "kernel_size": kernel,
        "stride": stride,
        "dilation": dilation,
        "in_dilations": in_dilation,
        "padding": (*pads[:n], *ends),
        "outputs": tuple(out),
    }


def _pool_infer(specs: Sequence[TensorSpec], attrs: Attrs) -> list[TensorSpec]:
    (x,) = specs
    return [TensorSpec((*x.shape[:2], *attrs["outputs"]), x.dtype)]


def _window(attrs: Attrs) -> dict[str, Any]:
    return {
        "window_dimensions": (1, 1, *attrs["kernel_size"]),
        "window_strides": (1, 1, *attrs["stride"]),
        "padding": ((0, 0), (0, 0), *_pairs(attrs["padding"])),
        "base_dilation": (1, 1, *attrs["in_dilations"]),
        "window_dilation": (1, 1, *attrs["dilation"]),
    }


def _max_pool_lower(ctx: Any, attrs: Attrs, x: jax.Array) -> list[jax.Array]:
    # The initial values are NumPy scalars, known while tracing, so that JAX sees a max (or sum) reduction it can
    # differentiate; a jnp value is a tracer under jit, and the generic reduction has no VJP.
    lowest = np.array(-np.inf if jnp.issubdtype(x.dtype, jnp.floating) else np.iinfo(x.dtype).min, x.dtype)
    return [lax.reduce_window(x, lowest, lax.max, **_window(attrs))]


def _average_pool_lower(ctx: Any, attrs: Attrs, x: jax.Array) -> list[jax.Array]:
    # Padding is not counted: each window averages the input elements it covers, as popart's pooling does.
    wide = x.astype(jnp.float32)
    total = lax.reduce_window(wide, np.float32(0), lax.add, **_window(attrs))
    count = lax.reduce_window(np.ones((1, 1, *x.shape[2:]), np.float32), np.float32(0), lax.add, **_window(attrs))
    return [(total / count).astype(x.dtype)]


# popxl names the pools' outputs `maxpool_out` and `averagepool_out` (python/popxl/ops/pool.py).
MAX_POOL = register(
    OpDef(
        "max_pool",
        _pool_infer,
        _max_pool_lower,
        grad=vjp_grad(),
        normalise=_pool_normalise,
        output_names=("maxpool_out",),
    )
)
AVERAGE_POOL = register(
    OpDef(
        "average_pool",
        _pool_infer,
        _average_pool_lower,
        grad=vjp_grad(linear=True),
        normalise=_pool_normalise,
        output_names=("averagepool_out",),
    )
)
