"""Initialisers and variable factories: truncated normals made once per variable, in the variable's dtype."""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import popxl
import popxl_addons.layers.init as init
from popxl_addons.core import Module, named_variable_buffers
from popxl_addons.core.modules.variable_factory import SizedSource, VariableFactory
from popxl_addons.layers import Embedding, Linear
from popxl_addons.layers.init import TruncatedNormal, truncated_normal

SHAPE = (1024, 4096)  # a realistic weight: GPT-2-small's feed-forward is 768 x 3072
N = math.prod(SHAPE)


def _truncated_moments(bound: float) -> tuple[float, float, float]:
    """Second and fourth moments of a standard normal truncated to [-bound, bound], and P(|z| < 1)."""
    mass = math.erf(bound / math.sqrt(2))
    density = math.exp(-(bound**2) / 2) / math.sqrt(2 * math.pi)
    m2 = 1 - 2 * bound * density / mass
    m4 = 3 * m2 - 2 * bound**3 * density / mass
    return m2, m4, math.erf(1 / math.sqrt(2)) / mass


def test_truncated_normal_has_the_truncated_distribution_at_a_realistic_size() -> None:
    std, bound, mean = 0.02, 2.0, 0.0
    w = truncated_normal(SHAPE, std, bound, seed=3)
    assert w.shape == SHAPE and w.dtype == np.float32
    assert np.all(np.abs(w) <= np.float32(bound * std))
    m2, m4, inner = _truncated_moments(bound)
    sigma = std * math.sqrt(m2)  # the standard deviation after truncation
    # Six standard errors of each estimate for N samples: a false failure has odds of about 1e-9.
    z = 6.0
    x = w.astype(np.float64)  # the statistics only; not the initialiser
    assert abs(x.mean() - mean) < z * sigma / math.sqrt(N)
    se_std = std * math.sqrt((m4 - m2**2) / N) / (2 * math.sqrt(m2))
    assert abs(x.std() - sigma) < z * se_std
    # The shape, not just the moments: the fraction within one (untruncated) standard deviation.
    fraction = float(np.mean(np.abs(x) < std))
    assert abs(fraction - inner) < z * math.sqrt(inner * (1 - inner) / N)


def test_mean_std_and_bound_are_applied() -> None:
    w = truncated_normal((200_000,), std=3.0, bound=1.5, mean=10.0, seed=0)
    assert w.min() >= np.float32(10.0 - 4.5) and w.max() <= np.float32(10.0 + 4.5)
    m2, _, _ = _truncated_moments(1.5)
    assert abs(w.mean() - 10.0) < 0.05 and abs(w.std() - 3.0 * math.sqrt(m2)) < 0.05
    scalar = truncated_normal((), seed=0)
    assert scalar.shape == () and abs(float(scalar)) <= 0.04


@contextmanager
def _peak_bytes() -> Iterator[list[int]]:
    """The peak of traced allocations (NumPy's data included) inside the block, in bytes."""
    peak: list[int] = []
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        yield peak
        peak.append(tracemalloc.get_traced_memory()[1] - base)
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "dtype, popxl_dtype",
    [(np.float32, popxl.float32), (np.float16, popxl.float16), (ml_dtypes.bfloat16, popxl.bfloat16)],
)
def test_values_are_made_in_the_variable_dtype_without_float64_arrays(dtype: Any, popxl_dtype: popxl.dtype) -> None:
    # A float64 draw of N values alone is 2 x N x 4 bytes; with a cast or |z| it passes 2.5 x N x 4.
    limit = 2.5 * N * 4
    with _peak_bytes() as peak:
        w = truncated_normal(SHAPE, dtype=dtype, seed=0)
    assert w.dtype == np.dtype(dtype) and peak[0] < limit
    del w
    ir = popxl.Ir()
    with ir.main_graph:
        factory = VariableFactory(TruncatedNormal(SHAPE, dtype=dtype), popxl_dtype, "w")
        with _peak_bytes() as peak:
            data = factory.next_data()
        assert data.dtype == np.dtype(dtype) and peak[0] < limit
        del data
        # The whole path to a variable (popxl.variable copies the data once).
        with _peak_bytes() as peak:
            v = factory.create_tensor()
        assert v.dtype is popxl_dtype and peak[0] < limit


def _counted(fn: Callable[[], Any]) -> tuple[Callable[[], Any], list[int]]:
    calls = [0]

    def counted() -> Any:
        calls[0] += 1
        return fn()

    return counted, calls


def test_a_callable_runs_once_per_variable() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        source, calls = _counted(partial(truncated_normal, (4, 3)))
        factory = VariableFactory(source, popxl.float32, "w")
        assert calls[0] == 1  # drawn for the shape and dtype, and kept for the first variable
        values = [factory.create_tensor().host_data for _ in range(3)]
        assert calls[0] == 3 and not np.array_equal(values[0], values[1])


class _CountedNormal(TruncatedNormal):
    calls = 0

    def __call__(self) -> np.ndarray[Any, Any]:
        type(self).calls += 1
        return super().__call__()


def test_a_sized_source_runs_only_for_variables() -> None:
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        source = _CountedNormal((4, 3))
        assert isinstance(source, SizedSource)
        factory = VariableFactory(source, None, "w")
        assert (factory.shape, factory.dtype, source.calls) == ((4, 3), popxl.float32, 0)
        factory.create_tensor(empty=True)
        assert source.calls == 0
        factory.create_tensor()
        assert source.calls == 1
        # A grouped variable: one draw per group, each group's values different.
        grouped = VariableFactory(source, popxl.float32, "g", replica_grouping=ir.replica_grouping(1, 2))
        data = grouped.create_tensor().host_data
        assert source.calls == 3 and data.shape == (2, 4, 3) and not np.array_equal(data[0], data[1])


class _Layer(Module):
    """A Linear and an Embedding (truncated normals) beside a hand-made variable."""

    def __init__(self, source: Callable[[], Any]) -> None:
        super().__init__()
        self.source = source
        self.linear = Linear(6)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        extra = self.add_variable_input("extra", self.source, x.dtype)
        y: popxl.Tensor = self.linear(x) + extra
        return y


def test_each_factory_of_a_module_runs_once_per_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    normals = [0]
    real = init.truncated_normal

    def counted_normal(*args: Any, **kwargs: Any) -> np.ndarray[Any, Any]:
        normals[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(init, "truncated_normal", counted_normal)
    source, calls = _counted(partial(np.zeros, (6,), np.float32))
    ir = popxl.Ir()
    with ir.main_graph:
        factories, _ = _Layer(source).create_graph(popxl.TensorSpec((2, 5), popxl.float32))
        assert (normals[0], calls[0]) == (0, 1)  # the plain callable's first call gave its shape
        factories.init()
        assert (normals[0], calls[0]) == (1, 1)
        buffers = named_variable_buffers(factories, 3)
        for row in range(3):
            factories.init_remote(buffers, row)
        assert (normals[0], calls[0]) == (4, 4)
        factories.init(empty=True)
        assert (normals[0], calls[0]) == (4, 4)
        embedding, _ = Embedding(popxl.float16, 32, 4).create_graph(popxl.TensorSpec((3,), popxl.int32))
        assert normals[0] == 4
        weight = embedding.init().weight
        assert normals[0] == 5 and weight.dtype is popxl.float16


def _linear_weight(seed: int | None = None) -> np.ndarray[Any, Any]:
    if seed is not None:
        np.random.seed(seed)
    ir = popxl.Ir()
    with ir.main_graph:
        factories, _ = Linear(16).create_graph(popxl.TensorSpec((2, 8), popxl.float32))
        return np.array(factories.init().weight.host_data)


def test_values_are_deterministic_for_a_seed() -> None:
    # Through numpy's global state, as popxl-addons' scipy draws are (values differ from its float64 ones).
    first, second = _linear_weight(7), _linear_weight(7)
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first, _linear_weight(8))
    assert not np.array_equal(_linear_weight(), _linear_weight())  # the global state moves on
    np.random.seed(7)
    np.testing.assert_array_equal(truncated_normal((8, 16)), first)
    # A given seed: an int gives the same values each call, a Generator a reproducible sequence.
    np.testing.assert_array_equal(truncated_normal(100, seed=1), truncated_normal(100, seed=1))
    a = np.random.default_rng(2)
    b = np.random.default_rng(2)
    assert np.array_equal(truncated_normal(100, seed=a), truncated_normal(100, seed=b))
    assert not np.array_equal(truncated_normal(100, seed=a), truncated_normal(100, seed=2))
    np.testing.assert_array_equal(
        truncated_normal(100, dtype=np.float16, seed=4), truncated_normal(100, seed=4).astype(np.float16)
    )
