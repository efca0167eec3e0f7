"""AdamOptimizerStep against PyTorch's AdamW, and against popart's arithmetic written in NumPy.

With a float32 first moment the step is PyTorch's AdamW to float32 rounding. With a float16
first moment it is popart's: the gradient is cast to float16 and the moving average's factors
(`beta1`, `1 - beta1`) and the first bias correction are float16 numbers, the update term is
rounded to float16 when no weight decay is applied; against PyTorch that holds to float16's
precision, and against the NumPy model of popart's arithmetic it holds to the last bit or so.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl_addons.core import AdamOptimizerStep

F16, F32 = np.float16, np.float32
STEPS = 5


def _r16(x: Any) -> np.ndarray:
    """Rounded to float16, held in float32."""
    return np.asarray(x, F32).astype(F16).astype(F32)


def numpy_popart_adamw(
    w: np.ndarray,
    grads: Sequence[np.ndarray] | np.ndarray,
    lr: float,
    b1: float,
    b2: float,
    eps: float,
    wd: float,
    first_f16: bool,
    bias_correction: bool = True,
) -> np.ndarray:
    """AdamW in float32 as popart computes it (moving averages, AdamUpdater, scaled add)."""
    w = w.astype(F32)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    b1_, b2_, one = F32(b1), F32(b2), F32(1)
    for t, g in enumerate(grads, start=1):
        g = g.astype(F32)
        if first_f16:  # float16 arithmetic on the float16-cast gradient
            m = _r16(_r16(b1_) * m + _r16(one - b1_) * _r16(g))
        else:
            m = (m * b1_ + (one - b1_) * g).astype(F32)
        v = (v * b2_ + (one - b2_) * (g * g)).astype(F32)
        mhat, vhat = m, v
        if bias_correction:
            c1 = one - b1_ ** F32(t)
            mhat = _r16(m / _r16(c1)) if first_f16 else m / c1
            vhat = v / (one - b2_ ** F32(t))
        update = (mhat / (np.sqrt(vhat) + F32(eps))).astype(F32)
        if wd != 0:
            update = update + F32(wd) * w  # the weight is an input: the update term is float32
        elif first_f16:
            update = _r16(update)  # without a weight the update term has the first moment's type
        w = (w + F32(-lr) * update).astype(F32)
    return w


def run_adam(
    w0: np.ndarray,
    grads: np.ndarray,
    tensor_hyperparameters: bool = False,
    grad_factor: float = 1.0,
    clip: float | None = None,
    **kwargs: Any,
) -> tuple[np.ndarray, dict[str, np.ndarray], list[str]]:
    """`len(grads)` steps of AdamOptimizerStep on `w0`; the weight, the state and the state's names.

    `grad_factor` multiplies the gradient fed to the step (the loss scaling to undo); with `clip`,
    the gradient's global norm (of the unscaled gradient) is computed in the graph and clipped to it.
    """
    ir = popxl.Ir()
    with ir.main_graph:
        var = popxl.variable(w0, name="w")
        h = popxl.h2d_stream(w0.shape, popxl.float32, "grad")
        grad = ops.host_load(h)
        if tensor_hyperparameters:
            kwargs = {k: popxl.constant(F32(x)) if isinstance(x, float) else x for k, x in kwargs.items()}
        if clip is not None:
            unscaled = grad * (1 / grad_factor)
            kwargs["global_norm"] = ops.sqrt(ops.sum(unscaled * unscaled))
            kwargs["global_norm_max"] = clip
        state, step = AdamOptimizerStep().create_graph(var, grad, **kwargs)
        variables = state.init()
        order = list(inspect.signature(AdamOptimizerStep.build).parameters)  # graph inputs follow it
        tensor_args = [kwargs[k] for k in order if isinstance(kwargs.get(k), popxl.Tensor)]
        step.bind(variables).call(var, grad, *tensor_args)  # tensor arguments become graph inputs
    with popxl.Session(ir, "cpu") as session:
        for g in grads:
            session.run({h: (g * grad_factor).astype(F32)})
        got = session.get_tensor_data(var)
        data = {k: session.get_tensor_data(t) for k, t in variables.to_dict().items()}
    return got, data, sorted(variables.keys_flat())


def torch_adamw(
    w0: np.ndarray, grads: np.ndarray, lr: float, b1: float, b2: float, eps: float, wd: float, clip: float | None = None
) -> np.ndarray:
    torch = pytest.importorskip("torch")
    p = torch.tensor(w0.copy(), requires_grad=True)
    opt = torch.optim.AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    for g in grads:
        p.grad = torch.tensor(g.copy())
        if clip is not None:
            torch.nn.utils.clip_grad_norm_([p], clip)
        opt.step()
    return np.asarray(p.detach().numpy())


def torch_formula(
    w0: np.ndarray, grads: np.ndarray, lr: float, b1: float, b2: float, eps: float, wd: float, bias_correction: bool
) -> np.ndarray:
    """AdamW written with torch tensors, its bias correction optional (torch.optim.AdamW has no switch)."""
    torch = pytest.importorskip("torch")
    w = torch.tensor(w0.copy())
    m, v = torch.zeros_like(w), torch.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        gt = torch.tensor(g.copy())
        w = w * (1 - lr * wd)
        m = m * b1 + (1 - b1) * gt
        v = v * b2 + (1 - b2) * gt * gt
        c1, c2 = (1 - b1**t, 1 - b2**t) if bias_correction else (1.0, 1.0)
        w = w - lr / c1 * m / ((v / c2).sqrt() + eps)
    return np.asarray(w.numpy())


def data(seed: int, shape: tuple[int, ...] = (3, 4)) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=shape).astype(F32), rng.normal(size=(STEPS, *shape)).astype(F32)


HP: dict[str, Any] = {"lr": 0.05, "beta1": 0.9, "beta2": 0.999, "eps": 1e-5}


def _torch_args(wd: float) -> dict[str, float]:
    return {"lr": HP["lr"], "b1": HP["beta1"], "b2": HP["beta2"], "eps": HP["eps"], "wd": wd}


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
@pytest.mark.parametrize("tensor_hyperparameters", [False, True])
def test_float32_first_moment_is_torch_adamw(weight_decay: float, tensor_hyperparameters: bool) -> None:
    w0, grads = data(1)
    got, state, names = run_adam(
        w0,
        grads,
        tensor_hyperparameters,
        weight_decay=weight_decay,
        first_order_dtype=popxl.float32,
        **HP,
    )
    expected = torch_adamw(w0, grads, **_torch_args(weight_decay))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=2e-6)
    assert not np.allclose(got, w0, atol=10 * HP["lr"] * 0.1)  # several steps of about lr each were taken
    assert names == ["first_order", "second_order", "step"]
    assert state["first_order"].dtype == np.float32 and state["step"] == STEPS


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_float16_first_moment_is_torch_adamw_to_float16_precision(weight_decay: float) -> None:
    w0, grads = data(2)
    got, state, _ = run_adam(w0, grads, weight_decay=weight_decay, **HP)  # float16 is the default
    expected = torch_adamw(w0, grads, **_torch_args(weight_decay))
    assert state["first_order"].dtype == np.float16
    # Each step's update (about 1 in size, times lr) is off by float16 rounding, a few 1e-3 of it.
    np.testing.assert_allclose(got, expected, rtol=0, atol=STEPS * HP["lr"] * 3e-3)
    # ... and it is float16 arithmetic: the float32 first moment gives another result.
    got32, _, _ = run_adam(w0, grads, weight_decay=weight_decay, first_order_dtype=popxl.float32, **HP)
    assert np.abs(got - got32).max() > 1e-6


@pytest.mark.parametrize("first_f16", [False, True])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
@pytest.mark.parametrize("bias_correction", [True, False])
def test_matches_popart_arithmetic_in_numpy(first_f16: bool, weight_decay: float, bias_correction: bool) -> None:
    w0, grads = data(3)
    dtype = popxl.float16 if first_f16 else popxl.float32
    got, _, names = run_adam(
        w0, grads, weight_decay=weight_decay, first_order_dtype=dtype, bias_correction=bias_correction, **HP
    )
    expected = numpy_popart_adamw(
        w0, grads, HP["lr"], HP["beta1"], HP["beta2"], HP["eps"], weight_decay, first_f16, bias_correction
    )
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    assert ("step" in names) == bias_correction


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_without_bias_correction_is_the_uncorrected_torch_formula(weight_decay: float) -> None:
    w0, grads = data(4)
    # The formula is torch's AdamW when corrected ...
    args = _torch_args(weight_decay)
    corrected = torch_formula(w0, grads, **args, bias_correction=True)
    np.testing.assert_allclose(corrected, torch_adamw(w0, grads, **args), rtol=1e-5, atol=2e-6)
    # ... and the step without bias correction is it uncorrected (which differs a lot from corrected).
    got, _, _ = run_adam(
        w0, grads, weight_decay=weight_decay, first_order_dtype=popxl.float32, bias_correction=False, **HP
    )
    expected = torch_formula(w0, grads, **args, bias_correction=False)
    # Uncorrected, v starts at (1 - beta2) * g**2 and the update term near 3: float32 noise is larger.
    np.testing.assert_allclose(got, expected, rtol=3e-5, atol=2e-5)
    assert np.abs(expected - corrected).max() > 1e-2


@pytest.mark.parametrize("tensor_scale", [False, True])
def test_loss_scaling_is_undone_before_the_step(tensor_scale: bool) -> None:
    w0, grads = data(5)
    scale: float | popxl.Tensor = 128.0
    got, _, _ = run_adam(
        w0, grads, tensor_scale, grad_factor=128.0, loss_scaling=scale, weight_decay=0.01,
        first_order_dtype=popxl.float32, **HP,
    )  # fmt: skip
    np.testing.assert_allclose(got, torch_adamw(w0, grads, **_torch_args(0.01)), rtol=1e-5, atol=2e-6)
    # Not undone, Adam is scale-invariant but eps is not: a small gradient tells the difference.
    small = grads * 1e-5
    got_scaled, _, _ = run_adam(w0, small, grad_factor=128.0, loss_scaling=128.0, first_order_dtype=popxl.float32, **HP)
    got_unscaled, _, _ = run_adam(w0, small * 128.0, first_order_dtype=popxl.float32, **HP)
    np.testing.assert_allclose(got_scaled, torch_adamw(w0, small, **_torch_args(0.01)), rtol=1e-5, atol=2e-6)
    assert np.abs(got_scaled - got_unscaled).max() > 1e-3


@pytest.mark.parametrize("max_norm", [0.005, 1.0])
@pytest.mark.parametrize("loss_scaling", [1.0, 16.0])
def test_global_norm_clipping_is_torch_clip_grad_norm(max_norm: float, loss_scaling: float) -> None:
    w0, grads = data(6)
    grads = grads * 0.01  # small gradients (norms about 0.03) so that eps and the clipping both show
    norms = np.sqrt((grads.astype(np.float64) ** 2).sum(axis=(1, 2)))
    clipped = max_norm < 1
    assert (norms > max_norm).all() == clipped and (norms < max_norm).all() != clipped
    got, _, _ = run_adam(
        w0, grads, grad_factor=loss_scaling, clip=max_norm, loss_scaling=loss_scaling, weight_decay=0.01,
        first_order_dtype=popxl.float32, **HP,
    )  # fmt: skip
    expected = torch_adamw(w0, grads, **_torch_args(0.01), clip=max_norm)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=2e-6)
    unclipped = torch_adamw(w0, grads, **_torch_args(0.01))
    assert (np.abs(unclipped - expected).max() > 1e-4) == clipped


def test_global_norm_needs_its_maximum() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        var = popxl.variable(np.zeros(3, F32))
        grad = popxl.constant(np.ones(3, F32))
        with pytest.raises(ValueError, match="global_norm_max"):
            AdamOptimizerStep().create_graph(var, grad, lr=0.1, global_norm=popxl.constant(F32(1)))


def test_the_anchor_case_one_step_at_lr_2() -> None:
    """popxl-addons' own test: one step, lr=2, eps=1e-5, no weight decay, float16 first moment, to 4 decimals."""
    np.random.seed(42)
    w0 = np.random.normal(0, 1, (2, 2)).astype(F32)
    g = np.random.normal(0, 1, (1, 2, 2)).astype(F32)
    got, _, _ = run_adam(w0, g, lr=2.0, eps=1e-5, weight_decay=0.0)
    np.testing.assert_allclose(got, numpy_popart_adamw(w0, g, 2.0, 0.9, 0.999, 1e-5, 0.0, True), rtol=1e-6)
    np.testing.assert_almost_equal(got, torch_adamw(w0, g, 2.0, 0.9, 0.999, 1e-5, 0.0), 4)
