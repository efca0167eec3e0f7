"""Every registered op kind held to its declaration: shape rule, writes, values and gradient; and in float16.

Each example's reference is the op's maths written directly with `jax.numpy`;
an op kind registered without an example here fails `test_every_op_kind_has_an_example`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.op import REGISTRY
from popxl.op_contract import (
    OpExample,
    check_flops,
    check_gradient,
    check_ipu_settings,
    check_shape_rule,
    check_values,
    float16_errors,
    runtime_op_kinds,
)

Array = np.ndarray[Any, Any]
Factory = Callable[[popxl.Ir], OpExample]
RNG = np.random.default_rng(7)


def f32(*shape: int, low: float | None = None) -> Array:
    """Random float32 values, above `low` when given."""
    x = RNG.normal(size=shape).astype(np.float32)
    return (np.abs(x) + low).astype(np.float32) if low is not None else x


def i32(*values: int) -> Array:
    """An int32 vector."""
    return np.asarray(values, np.int32)


def seed() -> Array:
    """A random seed tensor's value."""
    return np.asarray([11, 23], np.uint32)


def key(s: jax.Array) -> jax.Array:
    """The JAX key of a popxl seed."""
    return jax.random.wrap_key_data(s.astype(jnp.uint32), impl="threefry2x32")


def unary(fn: Callable[[jax.Array], jax.Array], low: float | None = None) -> Factory:
    """An elementwise unary op on a (3, 4) tensor."""
    return lambda ir: OpExample([f32(3, 4, low=low)], reference=lambda x: [fn(x)])


def binary(fn: Callable[[jax.Array, jax.Array], jax.Array], low: float | None = None) -> Factory:
    """An elementwise binary op on (3, 4) and a broadcast (4,) tensor."""
    return lambda ir: OpExample([f32(3, 4, low=low), f32(4, low=low)], reference=lambda a, b: [fn(a, b)])


def compare(fn: Callable[[jax.Array, jax.Array], jax.Array]) -> Factory:
    """A comparison of (3, 4) and (4,) tensors."""
    return lambda ir: OpExample([f32(3, 4), f32(4)], reference=lambda a, b: [fn(a, b)])


def logical(fn: Callable[[jax.Array, jax.Array], jax.Array]) -> Factory:
    """A logical op on bool tensors."""
    return lambda ir: OpExample([RNG.random((3, 4)) > 0.5, RNG.random(4) > 0.5], reference=lambda a, b: [fn(a, b)])


def gelu_tanh(x: jax.Array) -> jax.Array:
    """GELU, tanh approximation, written out."""
    return 0.5 * x * (1 + jnp.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def reduction(fn: Callable[..., jax.Array]) -> Factory:
    """A reduction over axes 0 and 2 of a (3, 4, 5) tensor."""
    attrs = {"axis": (0, -1), "keepdims": False}
    return lambda ir: OpExample([f32(3, 4, 5)], attrs, reference=lambda x: [fn(x, axis=(0, 2))])


def group_norm_ref(x: jax.Array, w: jax.Array, b: jax.Array) -> list[jax.Array]:
    """Group norm of (2, 6, 3) over 3 groups of 2 channels, written out, with each group's mean and 1 / std."""
    g = x.reshape(2, 3, 6)
    mean = g.mean(axis=-1, keepdims=True)
    var = ((g - mean) ** 2).mean(axis=-1, keepdims=True)
    y = ((g - mean) / jnp.sqrt(var + 1e-5)).reshape(2, 6, 3)
    return [y * w[None, :, None] + b[None, :, None], mean.reshape(6), 1 / jnp.sqrt(var.reshape(6) + 1e-5)]


def group_norm_grads(inputs: Any, dys: Any) -> list[jax.Array]:
    """popart's rule: the VJP of the normalised output alone (the statistics' gradients are not propagated)."""
    _, pullback = jax.vjp(lambda *v: group_norm_ref(*v)[0], *inputs)
    return list(pullback(dys[0]))


def group_norm(ir: popxl.Ir) -> OpExample:
    """Group norm of (2, 6, 3) over 3 groups."""
    return OpExample(
        [f32(2, 6, 3), f32(6), f32(6)],
        {"num_groups": 3, "eps": 1e-5},
        reference=group_norm_ref,
        grad_reference=group_norm_grads,
        rtol=1e-4,
        atol=1e-4,
    )


def group_norm_grad(ir: popxl.Ir) -> OpExample:
    """The gradients of group norm's x, scale and bias from the forward's statistics, against the VJP."""
    x, w, b, dy = f32(2, 6, 3), f32(6), f32(6), f32(2, 6, 3)
    g = x.reshape(2, 3, 6).astype(np.float64)
    mean = g.mean(axis=-1).reshape(6).astype(np.float32)
    inv_std = (1 / np.sqrt(g.var(axis=-1) + 1e-5)).reshape(6).astype(np.float32)

    def reference(x: jax.Array, w: jax.Array, mean: jax.Array, inv_std: jax.Array, dy: jax.Array) -> list[Any]:
        _, pullback = jax.vjp(lambda *v: group_norm_ref(*v)[0], x, w, jnp.asarray(b))
        return list(pullback(dy))

    return OpExample(
        [x, w, mean, inv_std, dy], {"num_groups": 3, "eps": 1e-5}, reference=reference, rtol=1e-4, atol=1e-4
    )


def dynamic_update(inplace: bool) -> Factory:
    """Rows 1..2 of a (6, 5) tensor replaced."""
    return lambda ir: OpExample(
        [f32(6, 5), f32(2, 5), i32(1)],
        {"axes": [0], "sizes": [2]},
        reference=lambda t, u, i: [jax.lax.dynamic_update_slice_in_dim(t, u, i[0], 0)],
    )


def stream_load(ir: popxl.Ir) -> OpExample:
    """The first transfer of a host-to-device stream."""
    stream = popxl.h2d_stream((3,), popxl.float32, "x")
    data = f32(2, 3)
    return OpExample(
        [], {"stream": stream}, reference=lambda: [jnp.asarray(data[0])], host_inputs={stream.tensor_id: data}
    )


def stream_store(ir: popxl.Ir) -> OpExample:
    """One transfer to a device-to-host stream."""
    return OpExample([f32(3)], {"stream": popxl.d2h_stream((3,), popxl.float32, "y")}, reference=lambda x: [])


def buffer_load(ir: popxl.Ir) -> OpExample:
    """Entry 1 of a remote buffer."""
    return OpExample([np.int32(1)], {"buffer": popxl.remote_buffer((3,), popxl.float32, 2)})


def buffer_load_inplace(ir: popxl.Ir) -> OpExample:
    """Entry 1 of a remote buffer, into a tensor."""
    return OpExample([f32(3), np.int32(1)], {"buffer": popxl.remote_buffer((3,), popxl.float32, 2)})


def buffer_store(ir: popxl.Ir) -> OpExample:
    """A tensor into entry 0 of a remote buffer."""
    return OpExample([np.int32(0), f32(3)], {"buffer": popxl.remote_buffer((3,), popxl.float32, 2)})


def call(ir: popxl.Ir) -> OpExample:
    """A call of x * y + sin(x)."""
    spec = popxl.TensorSpec((3,), popxl.float32)
    graph = ir.create_graph(lambda x, y: x * y + ops.sin(x), spec, spec)
    return OpExample([f32(3), f32(3)], {"graph": graph, "modified": ()}, reference=lambda x, y: [x * y + jnp.sin(x)])


def repeat(ir: popxl.Ir) -> OpExample:
    """Three iterations of x <- tanh(x * w) + w."""
    spec = popxl.TensorSpec((3,), popxl.float32)
    graph = ir.create_graph(lambda x, w: ops.tanh(x * w) + w, spec, spec)

    def reference(x: jax.Array, w: jax.Array) -> list[jax.Array]:
        for _ in range(3):
            x = jnp.tanh(x * w) + w
        return [x]

    return OpExample([f32(3), f32(3)], {"graph": graph, "count": 3}, reference=reference, rtol=1e-4)


def conditional(ir: popxl.Ir) -> OpExample:
    """x * y if the condition holds, else x / y: the then branch is taken (test_conditional takes the other)."""
    spec = popxl.TensorSpec((3,), popxl.float32)
    then_g = ir.create_graph(lambda x, y: x * y, spec, spec)
    else_g = ir.create_graph(lambda x, y: x / y, spec, spec)
    return OpExample(
        [np.array(True), f32(3), f32(3), f32(3), f32(3, low=0.5)],
        {"then_branch": then_g, "else_branch": else_g},
        reference=lambda c, a, b, x, y: [jnp.where(c, a * b, x / y)],
    )


PROBS = np.asarray(jax.nn.softmax(RNG.normal(size=(4, 5)), axis=-1), np.float32)
LABELS = i32(1, 0, 4, 2)


def nll_ref(p: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean negative log likelihood of the labels other than 2 (the ignored one)."""
    kept = labels != 2
    logp = jnp.log(p[jnp.arange(4), labels])
    return -jnp.sum(jnp.where(kept, logp, 0.0)) / jnp.sum(kept)


def nll_softmax_grad_ref(p: jax.Array, labels: jax.Array, g: jax.Array) -> list[jax.Array]:
    """The loss and d loss / d logits of softmax probabilities, for labels other than 2."""
    kept = (labels != 2)[:, None]
    dx = (p - jax.nn.one_hot(labels, 5)) * g / 3 * kept
    return [nll_ref(p, labels), dx]


def scatter_sum_ref(data: jax.Array, indices: jax.Array) -> list[jax.Array]:
    """Per column, the rows of `data` summed into 3 segments by `indices`."""
    per_column = jax.vmap(lambda d, i: jax.ops.segment_sum(d, i, 3), in_axes=(1, 1), out_axes=1)
    return [per_column(data, indices)]


def histogram_ref(x: jax.Array) -> list[jax.Array]:
    """Counts below -0.5, in [-0.5, 0), in [0, 1) and at or above 1."""
    edges = jnp.array([-0.5, 0.0, 1.0])
    bins = jnp.sum(x.ravel()[:, None] >= edges, axis=1)
    return [jnp.sum(bins[:, None] == jnp.arange(4), axis=0).astype(jnp.uint32)]


def batch_norm_ref(x: jax.Array, scale: jax.Array, bias: jax.Array, mean: jax.Array, var: jax.Array) -> list[Any]:
    """Per-channel (axis 1) normalisation by given estimates."""
    shape = (1, 3, 1)
    return [
        (x - mean.reshape(shape)) / jnp.sqrt(var.reshape(shape) + 1e-3) * scale.reshape(shape) + bias.reshape(shape)
    ]


ROIS = np.array([[0.5, 1.0, 6.0, 5.5], [2.0, -1.5, 9.5, 3.0]], np.float32)
ROI_IMAGES = i32(1, 0)


def roi_align_ref(t: jax.Array) -> list[jax.Array]:
    """torchvision's RoIAlign (aligned=False, 2x2 bins, 2x2 samples, scale 0.5), written as explicit loops."""
    height, width = t.shape[2:]
    regions = []
    for (x1, y1, x2, y2), b in zip(ROIS * 0.5, ROI_IMAGES):
        bin_h, bin_w = max(y2 - y1, 1.0) / 2, max(x2 - x1, 1.0) / 2
        rows = []
        for ph in range(2):
            cols = []
            for pw in range(2):
                total = jnp.zeros(t.shape[1], jnp.float32)
                for iy in range(2):
                    for ix in range(2):
                        y = y1 + ph * bin_h + (iy + 0.5) * bin_h / 2
                        x = x1 + pw * bin_w + (ix + 0.5) * bin_w / 2
                        if y < -1 or y > height or x < -1 or x > width:
                            continue
                        y, x = max(y, 0.0), max(x, 0.0)
                        y0, x0 = min(int(y), height - 1), min(int(x), width - 1)
                        y = float(y0) if y0 == height - 1 else y
                        x = float(x0) if x0 == width - 1 else x
                        y1_, x1_ = min(y0 + 1, height - 1), min(x0 + 1, width - 1)
                        ly, lx = y - y0, x - x0
                        for yi, xi, wgt in (
                            (y0, x0, (1 - ly) * (1 - lx)),
                            (y0, x1_, (1 - ly) * lx),
                            (y1_, x0, ly * (1 - lx)),
                            (y1_, x1_, ly * lx),
                        ):
                            total = total + wgt * t[b, :, yi, xi]
                cols.append(total / 4)
            rows.append(jnp.stack(cols, axis=-1))
        regions.append(jnp.stack(rows, axis=-2))
    return [jnp.stack(regions)]


E4M3 = jnp.float8_e4m3fnuz


def fp8(*shape: int) -> Array:
    """Random values of Graphcore's 1-4-3 float8 format (XLA's F8E4M3FNUZ)."""
    return f32(*shape).astype(E4M3)


def vjp(ir: popxl.Ir) -> OpExample:
    """The VJP of `mul` with respect to its first operand."""
    spec = popxl.TensorSpec((3,), popxl.float32)
    attrs = {
        "fwd": "mul",
        "fwd_attrs": {},
        "in_specs": [spec, spec],
        "out_specs": [spec],
        "needs": (1,),
        "wrt": (0,),
        "grads_of": (0,),
    }
    return OpExample([f32(3), f32(3)], attrs, reference=lambda b, dy: [dy * b])


def all_replicas(ir: popxl.Ir) -> popxl.ReplicaGrouping:
    """The grouping of both replicas."""
    return ir.replica_grouping()


def shards(flat: jax.Array, size: int) -> jax.Array:
    """Each replica's `size` elements of a padded flat vector, stacked."""
    padded = jnp.pad(flat, (0, 2 * size - flat.shape[0]))
    return jnp.stack([padded[:size], padded[size:]])


def all_reduce(ir: popxl.Ir) -> OpExample:
    """A sum over two replicas."""
    attrs = {"op": "add", "group": all_replicas(ir)}
    return OpExample([f32(2, 3)], attrs, reference=lambda x: [jnp.broadcast_to(x.sum(0), x.shape)], replicas=2)


def reduce_scatter(ir: popxl.Ir) -> OpExample:
    """Each replica's own shard of 3 of its 5 elements (popxl's 'local' op, as replica_sharded_slice).

    popxl's gradient is the all-gather of every replica's output gradient (so not the exact VJP,
    which would leave zeros outside each replica's shard).
    """
    attrs = {"op": "local", "group": all_replicas(ir), "rts": True}

    def grads(inputs: Any, dys: Any) -> list[jax.Array]:
        (dy,) = dys
        everything = dy.reshape(-1)[:5]
        return [jnp.stack([everything, everything])]

    return OpExample(
        [f32(2, 5)],
        attrs,
        reference=lambda x: [jnp.stack([shards(x[0], 3)[0], shards(x[1], 3)[1]])],
        replicas=2,
        grad_reference=grads,
    )


def all_gather(ir: popxl.Ir) -> OpExample:
    """Both replicas' tensors, stacked on every replica.

    popxl's gradient is each replica's own part of its own output gradient, not the sum over replicas.
    """
    attrs = {"group": all_replicas(ir), "shape": None}

    def grads(inputs: Any, dys: Any) -> list[jax.Array]:
        (dy,) = dys
        return [jnp.stack([dy[0, 0], dy[1, 1]])]

    return OpExample([f32(2, 3)], attrs, reference=lambda x: [jnp.stack([x, x])], replicas=2, grad_reference=grads)


def softmax_ref(x: jax.Array) -> jax.Array:
    """Softmax along the last axis, written out."""
    e = jnp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def inplace(fn: Callable[[jax.Array], jax.Array]) -> Factory:
    """An in-place elementwise op on a (3, 4) tensor."""
    return lambda ir: OpExample([f32(3, 4)], reference=lambda x: [fn(x)])


def topk(ir: popxl.Ir) -> OpExample:
    """The 2 smallest of each row of (3, 5), with their indices."""

    def reference(x: jax.Array) -> list[jax.Array]:
        order = jnp.argsort(x, axis=1)[:, :2]
        return [jnp.take_along_axis(x, order, axis=1), order.astype(jnp.int32)]

    return OpExample([f32(3, 5)], {"k": 2, "axis": -1, "largest": False}, reference=reference)


def scatter(ir: popxl.Ir) -> OpExample:
    """Rows of a (4, 3) tensor overwritten along axis 0 at per-element positions."""
    indices = np.asarray([[1, 0, 3], [2, 2, -4]], np.int32)

    def reference(t: jax.Array, i: jax.Array, v: jax.Array) -> list[jax.Array]:
        out = t
        for r in range(2):
            for c in range(3):
                out = out.at[int(indices[r, c]) % 4, c].set(v[r, c])
        return [out]

    return OpExample([f32(4, 3), indices, f32(2, 3)], {"axis": 0}, reference=reference)


def print_tensor(ir: popxl.Ir) -> OpExample:
    """A tensor printed on its way through."""
    attrs = {
        "title": "t",
        "print_self": False,
        "print_gradient": False,
        "summarise_threshold": 1000,
        "edge_items": 3,
        "max_line_width": 75,
        "digits": 8,
        "float_format": "auto",
        "separator": " ",
        "open_bracket": "[",
        "close_bracket": "]",
    }
    return OpExample([f32(3)], attrs, reference=lambda x: [x])


def adam_updater(ir: popxl.Ir) -> OpExample:
    """Adam's update term with bias correction and weight decay: the step (2 -> 3) is incremented first."""
    attrs = {"mode": "adam", "weight": True, "step": True}
    consts = [np.float32(0.01), np.float32(0.9), np.float32(0.999), np.float32(1e-6)]

    def reference(m: jax.Array, v: jax.Array, w: jax.Array, t: jax.Array, *c: jax.Array) -> list[jax.Array]:
        wd, b1, b2, eps = c
        step = t + 1
        return [(m / (1 - b1**step)) / (jnp.sqrt(v / (1 - b2**step)) + eps) + wd * w, step]

    return OpExample([f32(3), f32(3, low=0.1), f32(3), np.float32(2.0), *consts], attrs, reference=reference)


def adam_var_update(ir: popxl.Ir) -> OpExample:
    """The LAMB weight update: the trust ratio min(|w|, 2) / |x| scales the learning rate."""

    def reference(w: jax.Array, x: jax.Array, r1: jax.Array, r2: jax.Array, lr: jax.Array, mwn: jax.Array) -> Any:
        return [w - lr * jnp.minimum(jnp.sqrt(r1), mwn) / jnp.sqrt(r2) * x]

    w, x = f32(4), f32(4)
    inputs = [w, x, np.float32((w**2).sum()), np.float32((x**2).sum()), np.float32(0.1), np.float32(2.0)]
    return OpExample(inputs, reference=reference)


def windows(x: jax.Array, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int]) -> jax.Array:
    """Every window of the 2-D spatial axes of `x` (N, C, H, W), as (N, C, OH, OW, kH, kW), by slicing."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    oh = (x.shape[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (x.shape[3] - (kw - 1) * dw - 1) // sw + 1
    rows = [
        jnp.stack(
            [
                x[:, :, i * sh : i * sh + (kh - 1) * dh + 1 : dh, j * sw : j * sw + (kw - 1) * dw + 1 : dw]
                for j in range(ow)
            ],
            axis=2,
        )
        for i in range(oh)
    ]
    return jnp.stack(rows, axis=2)


def conv_ref(x: jax.Array, w: jax.Array, stride: Any, pads: Any, dilation: Any, groups: int) -> jax.Array:
    """A grouped 2-D convolution written as windows times weights; pads are (top, left, bottom, right)."""
    xp = jnp.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    win = windows(xp, w.shape[2:], stride, dilation)
    n, c, oh, ow, kh, kw = win.shape
    win = win.reshape(n, groups, c // groups, oh, ow, kh, kw)
    wg = w.reshape(groups, w.shape[0] // groups, *w.shape[1:])
    return jnp.einsum("ngchwij,gmcij->ngmhw", win, wg).reshape(n, w.shape[0], oh, ow)


def conv_transpose_ref(x: jax.Array, w: jax.Array, out: tuple[int, int], **conv: Any) -> jax.Array:
    """The transpose of `conv_ref` with weight `w` (C, M/groups, ...), applied to `x`: its VJP."""
    z = jnp.zeros((x.shape[0], w.shape[1] * conv["groups"], *out), x.dtype)
    _, pullback = jax.vjp(lambda v: conv_ref(v, w, **conv), z)
    return pullback(x)[0]


def pool_ref(x: jax.Array, kernel: Any, stride: Any, pads: Any, op: str) -> jax.Array:
    """Max or average (of the covered input elements) of each 2-D window, padding excluded."""
    spread = ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3]))
    if op == "max":
        return windows(jnp.pad(x, spread, constant_values=-jnp.inf), kernel, stride, (1, 1)).max(axis=(-2, -1))
    total = windows(jnp.pad(x, spread), kernel, stride, (1, 1)).sum(axis=(-2, -1))
    count = windows(jnp.pad(jnp.ones_like(x), spread), kernel, stride, (1, 1)).sum(axis=(-2, -1))
    return total / count


CONV_ATTRS = {"stride": (2, 1), "padding": (1, 0, 2, 1), "dilation": (1, 2), "groups": 2, "pad_type": "not_set"}
POOL_ATTRS = {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0, 1, 1), "dilation": None, "in_dilations": None}


def pool(op: str, ceil_mode: bool) -> Factory:
    """A pooling example; with `ceil_mode` the last window overhangs the padded input, as PyTorch allows."""
    attrs = {**POOL_ATTRS, "auto_pad": "not_set", "ceil_mode": ceil_mode}
    extra = 1 if ceil_mode else 0
    pads = (1, 0, 1 + extra, 1)
    return lambda ir: OpExample([f32(2, 3, 6, 5)], attrs, reference=lambda x: [pool_ref(x, (3, 2), (2, 1), pads, op)])


def _linear_resize_example(x: Array) -> OpExample:
    """Linear interpolation of `x` by 2 and 3 along its last two axes, against jax.image.resize.

    Both compute each output as two interpolations between neighbours, in float32, but find the source
    coordinates and weights differently: a coordinate below an axis's size n is off by a few roundings, at most
    about 4 n 2**-24, which moves a weight as much and the output by that times the largest step between
    neighbours; the products and sums round a few times more, each within 2**-24 of max |x|.
    """
    u = 2.0**-24
    steps = max(float(np.abs(np.diff(x, axis=a)).max()) for a in (2, 3))
    bound = sum(4 * n * u * steps for n in x.shape[2:]) + 8 * u * float(np.abs(x).max())
    return OpExample(
        [x],
        {
            "scale_factor": (1.0, 1.0, 2.0, 3.0),
            "mode": "linear",
            "nearest_mode": "round_prefer_floor",
            "coordinate_transformation_mode": "half_pixel",
        },
        reference=lambda t: [jax.image.resize(t, (2, 3, 8, 15), "linear", antialias=False)],
        rtol=0.0,
        atol=bound,
    )


EXAMPLES: dict[str, Factory] = {
    "conv": lambda ir: OpExample(
        [f32(2, 4, 7, 6), f32(6, 2, 3, 2)],
        CONV_ATTRS,
        reference=lambda x, w: [conv_ref(x, w, (2, 1), (1, 0, 2, 1), (1, 2), 2)],
        rtol=1e-5,
        atol=1e-5,
    ),
    "conv_transpose": lambda ir: OpExample(
        [f32(2, 4, 4, 3), f32(4, 3, 3, 2)],
        {**CONV_ATTRS, "output_padding": (1, 0), "output_shape": ()},
        reference=lambda x, w: [
            conv_transpose_ref(x, w, (7, 4), stride=(2, 1), pads=(1, 0, 2, 1), dilation=(1, 2), groups=2)
        ],
        rtol=1e-5,
        atol=1e-5,
    ),
    "max_pool": pool("max", ceil_mode=False),
    "average_pool": pool("average", ceil_mode=True),
    "sparse_accumulate_": lambda ir: OpExample(
        [f32(5, 3), f32(4, 3), i32(1, 3, 1, 0), np.float32(0.5)],
        {"axis": 0},
        reference=lambda t, x, i, f: [t.at[jnp.asarray([1, 3, 1, 0])].add(0.5 * x)],
    ),
    "adam_updater": adam_updater,
    "adam_var_update": adam_var_update,
    "lamb_square": lambda ir: OpExample([f32(3, 4)], reference=lambda x: [(x * x).sum()]),
    "ceil": unary(jnp.ceil),
    "floor": unary(jnp.floor),
    "sign": lambda ir: OpExample(
        [np.asarray([-2.0, 0.0, 3.0, np.nan], np.float32)],
        reference=lambda x: [jnp.asarray([-1.0, 0.0, 1.0, 0.0], jnp.float32)],
    ),
    "swish": unary(lambda x: x / (1 + jnp.exp(-x))),
    "geluerf": unary(lambda x: 0.5 * x * (1 + jax.scipy.special.erf(x / math.sqrt(2)))),
    "isnan": lambda ir: OpExample(
        [np.asarray([1.0, np.nan, np.inf], np.float32)], reference=lambda x: [jnp.asarray([False, True, False])]
    ),
    "isinf": lambda ir: OpExample(
        [np.asarray([1.0, np.nan, -np.inf], np.float32)], reference=lambda x: [jnp.asarray([False, False, True])]
    ),
    "clip": lambda ir: OpExample(
        [f32(3, 4)],
        {"min": -0.5, "max": 0.7},
        reference=lambda x: [jnp.where(x < -0.5, -0.5, jnp.where(x > 0.7, 0.7, x))],
    ),
    "increment_mod": lambda ir: OpExample(
        [np.asarray([-3, 0, 4, 9], np.int32)],
        {"increment": 2, "modulus": 5},
        reference=lambda x: [jnp.asarray([-1, 2, 1, 1], jnp.int32)],
    ),
    "increment_mod_": lambda ir: OpExample(
        [np.asarray([0.5, 3.0, 4.5], np.float32)],
        {"increment": 1.0, "modulus": 4.0},
        reference=lambda x: [jnp.asarray([1.5, 0.0, 1.5], jnp.float32)],
    ),
    "relu_": inplace(lambda x: jnp.where(x > 0, x, 0.0)),
    "gelu_": inplace(gelu_tanh),
    "geluerf_": inplace(lambda x: 0.5 * x * (1 + jax.scipy.special.erf(x / math.sqrt(2)))),
    "exp_": inplace(jnp.exp),
    "swish_": inplace(lambda x: x / (1 + jnp.exp(-x))),
    "detach_": inplace(lambda x: x),
    "reduce_prod": reduction(jnp.prod),
    "reduce_l1": reduction(lambda x, axis: jnp.abs(x).sum(axis=axis)),
    "reduce_l2": reduction(lambda x, axis: jnp.sqrt((x * x).sum(axis=axis))),
    "reduce_log_sum": lambda ir: OpExample(
        [f32(3, 4, 5, low=0.1)], {"axis": (0, -1), "keepdims": False}, reference=lambda x: [jnp.log(x.sum(axis=(0, 2)))]
    ),
    # An even count (12 per output): popxl takes the lower of the two middle elements.
    "reduce_median": lambda ir: OpExample(
        [f32(3, 4, 4)],
        {"axis": (0, 2), "keepdims": True},
        reference=lambda x: [jnp.sort(jnp.transpose(x, (1, 0, 2)).reshape(4, 12), axis=1)[:, 5].reshape(1, 4, 1)],
    ),
    "cumsum": lambda ir: OpExample(
        [f32(3, 4)], {"dim": -1}, reference=lambda x: [jnp.stack([x[:, : i + 1].sum(axis=1) for i in range(4)], axis=1)]
    ),
    "subsample": lambda ir: OpExample([f32(5, 6, 2)], {"strides": [2, 4]}, reference=lambda x: [x[::2, ::4]]),
    "topk": topk,
    "scatter": scatter,
    "print_tensor": print_tensor,
    "negate": unary(lambda x: -x),
    "exp": unary(jnp.exp),
    "log": unary(jnp.log, low=0.5),
    "sqrt": unary(jnp.sqrt, low=0.5),
    "tanh": unary(jnp.tanh),
    "sigmoid": unary(lambda x: 1 / (1 + jnp.exp(-x))),
    "relu": unary(lambda x: jnp.where(x > 0, x, 0.0)),
    "gelu": unary(gelu_tanh),
    "abs": unary(jnp.abs),
    "sin": unary(jnp.sin),
    "cos": unary(jnp.cos),
    "square": unary(lambda x: x * x),
    "reciprocal": unary(lambda x: 1 / x, low=0.5),
    "identity": unary(lambda x: x),
    "io_tile_copy": unary(lambda x: x),
    "detach": unary(jax.lax.stop_gradient),
    "logical_not": lambda ir: OpExample([RNG.random((3, 4)) > 0.5], reference=lambda x: [~x]),
    "add": binary(lambda a, b: a + b),
    "sub": binary(lambda a, b: a - b),
    "mul": binary(lambda a, b: a * b),
    "div": binary(lambda a, b: a / b, low=0.5),
    "pow": binary(lambda a, b: jnp.exp(b * jnp.log(a)), low=0.5),
    "maximum": binary(lambda a, b: jnp.where(a > b, a, b)),
    "minimum": binary(lambda a, b: jnp.where(a < b, a, b)),
    "fmod": binary(lambda a, b: a - b * jnp.trunc(a / b), low=0.5),
    "equal": lambda ir: OpExample([i32(1, 2, 3), i32(1, 0, 3)], reference=lambda a, b: [a == b]),
    "greater": compare(lambda a, b: a > b),
    "less": compare(lambda a, b: a < b),
    "logical_and": logical(lambda a, b: a & b),
    "logical_or": logical(lambda a, b: a | b),
    "add_": lambda ir: OpExample([f32(3, 4), f32(4)], reference=lambda a, b: [a + b]),
    "cast": lambda ir: OpExample(
        [f32(3, 4)], {"dtype": popxl.float16}, reference=lambda x: [x.astype(jnp.float16)], rtol=1e-3, atol=1e-3
    ),
    "where": lambda ir: OpExample(
        [RNG.random((3, 4)) > 0.5, f32(3, 4), f32(4)], reference=lambda c, a, b: [jnp.where(c, a, b)]
    ),
    "matmul": lambda ir: OpExample([f32(2, 3, 4), f32(4, 5)], reference=lambda a, b: [jnp.einsum("bij,jk->bik", a, b)]),
    "reshape": lambda ir: OpExample([f32(3, 4)], {"shape": (2, -1)}, reference=lambda x: [x.reshape(2, 6)]),
    "transpose": lambda ir: OpExample(
        [f32(2, 3, 4)], {"permutation": None}, reference=lambda x: [jnp.einsum("ijk->kji", x)]
    ),
    "slice": lambda ir: OpExample(
        [f32(5, 6)], {"slices": ((1, None, None), (None, None, -2))}, reference=lambda x: [x[1:, ::-2]]
    ),
    "concat": lambda ir: OpExample(
        [f32(2, 3), f32(2, 1)], {"axis": -1}, reference=lambda a, b: [jnp.concatenate([a, b], axis=1)]
    ),
    "expand": lambda ir: OpExample(
        [f32(3, 1)], {"shape": (2, 3, 4)}, reference=lambda x: [x[None] * jnp.ones((2, 3, 4), jnp.float32)]
    ),
    "gather": lambda ir: OpExample(
        [f32(5, 3), i32(0, 4, 7, -1, 2)],
        {"axis": 0, "zero_OOR": True},
        reference=lambda t, i: [jnp.stack([t[0], t[4], jnp.zeros(3), jnp.zeros(3), t[2]])],
    ),
    "dynamic_slice": lambda ir: OpExample(
        [f32(6, 5), i32(2)], {"axes": [0], "sizes": [3]}, reference=lambda t, i: [t[2:5]]
    ),
    "dynamic_update": dynamic_update(False),
    "dynamic_update_": dynamic_update(True),
    "onehot": lambda ir: OpExample(
        [i32(0, 3, 1), f32(2)],
        {"num_classes": 4, "axis": -1},
        reference=lambda t, v: [jnp.where(jnp.arange(4)[None] == t[:, None], v[1], v[0])],
    ),
    "argmax": lambda ir: OpExample(
        [f32(4, 5)], {"dim": -1, "keepdim": False}, reference=lambda x: [jnp.argmax(x, axis=1).astype(jnp.int32)]
    ),
    "argmin": lambda ir: OpExample(
        [f32(4, 5)], {"dim": 0, "keepdim": True}, reference=lambda x: [jnp.argmin(x, axis=0)[None].astype(jnp.int32)]
    ),
    "reduce_sum": reduction(jnp.sum),
    "reduce_mean": reduction(jnp.mean),
    "reduce_max": reduction(jnp.max),
    "reduce_min": reduction(jnp.min),
    "softmax": lambda ir: OpExample([f32(3, 4)], {"axis": -1}, reference=lambda x: [softmax_ref(x)]),
    "group_norm": group_norm,
    "group_norm_grad": group_norm_grad,
    "var_update": lambda ir: OpExample(
        [f32(3), f32(3), np.float32(0.5)], {"kind": "accumulate"}, reference=lambda t, x, f: [t + f * x]
    ),
    "init": lambda ir: OpExample(
        [],
        {"shape": (2, 3), "dtype": popxl.float32, "meta_shape": ()},
        reference=lambda: [jnp.zeros((2, 3), jnp.float32)],
    ),
    "split_random_seed": lambda ir: OpExample(
        [seed()], {"count": 3}, reference=lambda s: list(jax.random.key_data(jax.random.split(key(s), 3)))
    ),
    "random_uniform": lambda ir: OpExample(
        [seed()],
        {"shape": (3, 4), "low": -1.0, "high": 2.0, "dtype": popxl.float32},
        reference=lambda s: [jax.random.uniform(key(s), (3, 4), jnp.float32, -1.0, 2.0)],
    ),
    "random_normal": lambda ir: OpExample(
        [seed()],
        {"shape": (3, 4), "mean": 1.0, "std": 2.0, "dtype": popxl.float32},
        reference=lambda s: [jax.random.normal(key(s), (3, 4), jnp.float32) * 2.0 + 1.0],
    ),
    "interpolate": lambda ir: _linear_resize_example(f32(2, 3, 4, 5)),
    "roi_align": lambda ir: OpExample(
        [f32(2, 3, 6, 5), ROIS, ROI_IMAGES],
        {"output_size": (2, 2), "spatial_scale": 0.5, "sampling_ratio": 2},
        reference=lambda t, r, b: roi_align_ref(t),
        rtol=1e-5,
        atol=1e-6,
    ),
    "pow2scale_cast_to_fp8": lambda ir: OpExample(
        [f32(3, 4) * 4, np.int32(-2)],
        {"data_type": popxl.float8_143},
        reference=lambda x, s: [(x * 2.0**-2).astype(E4M3)],
    ),
    "pow2scale_cast_from_fp8": lambda ir: OpExample(
        [fp8(3, 4), np.int32(3)],
        {"data_type": popxl.float16},
        reference=lambda x, s: [(x.astype(jnp.float32) * 8).astype(jnp.float16)],
    ),
    "matmul_pow2scaled": lambda ir: OpExample(
        [fp8(2, 3, 4), fp8(4, 5), np.int32(-1)],
        reference=lambda a, b, s: [
            (jnp.einsum("bij,jk->bik", a.astype(jnp.float32), b.astype(jnp.float32)) / 2).astype(jnp.float16)
        ],
        rtol=1e-3,
    ),
    "conv_pow2scaled": lambda ir: OpExample(
        [fp8(2, 4, 7, 6), fp8(6, 2, 3, 2), np.int32(1)],
        CONV_ATTRS,
        reference=lambda x, w, s: [
            (2 * conv_ref(x.astype(jnp.float32), w.astype(jnp.float32), (2, 1), (1, 0, 2, 1), (1, 2), 2)).astype(
                jnp.float16
            )
        ],
        rtol=1e-3,
        atol=1e-3,
    ),
    "conv_transpose_pow2scaled": lambda ir: OpExample(
        [fp8(2, 4, 4, 3), fp8(4, 3, 3, 2), np.int32(0)],
        {**CONV_ATTRS, "output_padding": (1, 0), "output_shape": ()},
        reference=lambda x, w, s: [
            conv_transpose_ref(
                x.astype(jnp.float32),
                w.astype(jnp.float32),
                (7, 4),
                stride=(2, 1),
                pads=(1, 0, 2, 1),
                dilation=(1, 2),
                groups=2,
            ).astype(jnp.float16)
        ],
        rtol=1e-3,
        atol=1e-3,
    ),
    "shaped_dropout": lambda ir: OpExample(
        [f32(3, 4), seed()],
        {"shape": (3, 1), "ratio": 0.25},
        reference=lambda x, s: [jnp.where(jax.random.bernoulli(key(s), 0.75, (3, 1)), x / 0.75, 0.0)],
    ),
    "nll_loss": lambda ir: OpExample(
        [PROBS, LABELS],
        {"ignore_index": 2, "reduction": "mean", "log_prob": False},
        reference=lambda p, labels: [nll_ref(p, labels)],
        rtol=1e-5,
    ),
    "nll_loss_with_softmax_grad": lambda ir: OpExample(
        [PROBS, LABELS, np.float32(0.5)],
        {"ignore_index": 2, "reduction": "mean", "log_prob": False},
        reference=nll_softmax_grad_ref,
        rtol=1e-5,
    ),
    "groupedgather": lambda ir: OpExample(
        [f32(2, 4, 3), np.array([[3, 0, 1], [2, 2, 0]], np.int32)],
        {"axis": 1, "group_size": 2, "zero_OOR": False},
        reference=lambda t, i: [jnp.stack([t[0][i[0]], t[1][i[1]]])],
    ),
    "scatter_reduce": lambda ir: OpExample(
        [f32(5, 4), RNG.integers(0, 3, size=(5, 4)).astype(np.int32)],
        {"reduction": "sum", "axis": 0, "axis_size": 3},
        reference=scatter_sum_ref,
        rtol=1e-5,
    ),
    "histogram": lambda ir: OpExample(
        [f32(4, 6)], {"levels": (1.0, -0.5, 0.0), "absolute_of_input": False}, reference=histogram_ref
    ),
    "batch_norm_inference": lambda ir: OpExample(
        [f32(2, 3, 4), f32(3), f32(3), f32(3), f32(3, low=0.5)], {"epsilon": 1e-3}, reference=batch_norm_ref, rtol=1e-5
    ),
    "all_reduce": lambda ir: OpExample(
        [f32(3), f32(3), f32(3)],
        {"op": "add", "ipus": None, "identical_inputs": False, "identical_grad_inputs": False},
        reference=lambda a, b, c: [a + b + c] * 3,
    ),
    "dropout": lambda ir: OpExample(
        [f32(3, 4), seed()],
        {"p": 0.25},
        reference=lambda x, s: [jnp.where(jax.random.bernoulli(key(s), 0.75, (3, 4)), x / 0.75, 0.0)],
    ),
    "host_load": stream_load,
    "host_store": stream_store,
    "remote_load": buffer_load,
    "remote_load_": buffer_load_inplace,
    "remote_store": buffer_store,
    "call": call,
    "conditional": conditional,
    "repeat": repeat,
    "vjp": vjp,
    "replicated_all_reduce": all_reduce,
    "replicated_all_reduce_": all_reduce,
    "replicated_reduce_scatter": reduce_scatter,
    "replicated_all_gather": all_gather,
}
# The in-place views compute what their copying forms compute; check_values also holds their view updates.
EXAMPLES.update({f"{name}_": EXAMPLES[name] for name in ("reshape", "transpose", "slice", "concat")})


# The op kinds whose values depend on where host stream data and remote buffers live: rerun with
# POPXL_REMOTE_MEMORY=device (the placement mark).
PLACED = {"host_load", "host_store", "remote_load", "remote_load_", "remote_store"}


def _placed(names: list[str]) -> list[Any]:
    return [pytest.param(n, marks=pytest.mark.placement) if n in PLACED else n for n in names]


def test_every_op_kind_has_an_example() -> None:
    # Extensions (registered from other packages) hold their own op kinds to the same checks.
    runtime = set(runtime_op_kinds())
    assert sorted(runtime - set(EXAMPLES)) == [], "registered op kinds without a sweep example"
    assert sorted(set(EXAMPLES) - runtime) == [], "sweep examples of op kinds that are not registered"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_shape_rule_and_writes(name: str) -> None:
    check_shape_rule(REGISTRY[name], EXAMPLES[name])


@pytest.mark.parametrize("name", _placed(sorted(EXAMPLES)))
def test_values(name: str) -> None:
    check_values(REGISTRY[name], EXAMPLES[name])


@pytest.mark.parametrize("name", sorted(n for n in EXAMPLES if REGISTRY[n].grad is not None))
def test_gradient(name: str) -> None:
    check_gradient(REGISTRY[name], EXAMPLES[name])


@pytest.mark.parametrize("name", sorted(n for n in EXAMPLES if REGISTRY[n].popart.flops is not None))
def test_flops(name: str) -> None:
    check_flops(REGISTRY[name], EXAMPLES[name])


@pytest.mark.parametrize("name", sorted(n for n in EXAMPLES if REGISTRY[n].popart.ipu_settings))
def test_ipu_settings(name: str) -> None:
    check_ipu_settings(REGISTRY[name], EXAMPLES[name])


# The float16 pass: each example's float32 inputs, scaled to std 0.02 and to std 1 and rounded to float16, run
# in float16 and (cast back) in float32; outputs, in-place updates and autodiff's gradients must be finite and
# within FLOAT16_RTOL of the float32 results' magnitude (float16 keeps 11 significant bits: 2**-10 is 1e-3).
FLOAT16_SCALES = (0.02, 1.0)
FLOAT16_RTOL = 1e-2
FLOAT16_EXCLUDED = {
    "call": "its example's graph declares float32 inputs; the ops inside are held by their own kinds",
    "repeat": "its example's graph declares float32 inputs; the ops inside are held by their own kinds",
    "conditional": "its example's branches declare float32 inputs; the ops inside are held by their own kinds",
    "vjp": "its attrs declare the forward op's float32 specs; every gradient of this pass runs vjp in float16",
    "host_store": "its stream declares float32; a copy",
    "remote_load_": "its buffer declares float32; a copy",
    "remote_store": "its buffer declares float32; a copy",
}
# Inputs whose scale is not the data's: input i is scaled by std ** power (coordinates and probabilities keep
# theirs, a variance is the square of the data's scale).
FLOAT16_POWERS: dict[str, dict[int, float]] = {
    "roi_align": {1: 0},
    "nll_loss": {0: 0},
    "nll_loss_with_softmax_grad": {0: 0},
    "batch_norm_inference": {4: 2},
}


# Wider examples for the float16 pass, where an op's float16 trouble needs realistic sizes to show: a layer norm
# of 64 features, a softmax over 1000 classes, long running sums, a batch norm by a variance estimate of the
# data's scale with popxl's default epsilon.
FLOAT16_WIDE: dict[str, tuple[str, Factory]] = {
    "layer_norm_64": (
        "group_norm",
        lambda ir: OpExample([f32(8, 64), f32(64), f32(64)], {"num_groups": 1, "eps": 1e-5}),
    ),
    "softmax_1000": ("softmax", lambda ir: OpExample([f32(16, 1000)], {"axis": -1})),
    "cumsum_4096": ("cumsum", lambda ir: OpExample([f32(4, 4096)], {"dim": 1})),
    "reduce_l2_4096": ("reduce_l2", lambda ir: OpExample([f32(8, 4096)], {"axis": (1,), "keepdims": False})),
    "batch_norm_inference_eps": (
        "batch_norm_inference",
        lambda ir: OpExample([f32(4, 8, 16), f32(8), f32(8), f32(8), f32(8, low=0.5)], {"epsilon": 1e-5}),
    ),
}


def test_float16_exclusions_name_op_kinds() -> None:
    assert set(FLOAT16_EXCLUDED) | set(FLOAT16_POWERS) <= set(EXAMPLES)


@pytest.mark.parametrize("name", _placed(sorted(set(EXAMPLES) - set(FLOAT16_EXCLUDED)) + sorted(FLOAT16_WIDE)))
def test_float16(name: str) -> None:
    kind, factory = FLOAT16_WIDE.get(name, (name, EXAMPLES.get(name)))
    errors = float16_errors(REGISTRY[kind], factory, FLOAT16_SCALES, FLOAT16_POWERS.get(kind))
    far = {f"std {scale}: {label}": e for scale, found in errors.items() for label, e in found.items()}
    assert {k: e for k, e in far.items() if not e <= FLOAT16_RTOL} == {}, "float16 results far from float32's"
