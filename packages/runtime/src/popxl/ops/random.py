"""Random ops of `popxl.ops`."""

from __future__ import annotations

from typing import Any

from popxl import context, dtypes
from popxl.op import create_op
from popxl.opdefs import random as r
from popxl.tensor import Tensor


def split_random_seed(seed: Tensor, n: int = 2) -> tuple[Tensor, ...]:
    """`n` new seeds derived deterministically from `seed`."""
    if n < 1:
        raise ValueError(f"split_random_seed n must be >= 1, got {n}")
    # popxl (python/popxl/ops/random_seed.py) makes each seed by `create_random_seed(seed, constant(i))`:
    # outputs named `modified_seed`, each after a modifier constant `t`, whose ids are taken here too.
    graph = context.gcg()
    for _ in range(n):
        graph.take_id(context.name_scope_prefix() + "t")
    return tuple(create_op(r.SPLIT_SEED, [seed], {"count": n}, names=["modified_seed"] * n))


def random_uniform(
    seed_tensor: Tensor, shape: Any, low: float = 0.0, high: float = 1.0, dtype: Any = dtypes.float32
) -> Tensor:
    """Uniform samples in [low, high)."""
    attrs = {"shape": tuple(shape), "low": low, "high": high, "dtype": dtypes.as_dtype(dtype)}
    return create_op(r.RANDOM_UNIFORM, [seed_tensor], attrs)[0]


def random_normal(
    seed_tensor: Tensor, shape: Any, mean: float = 0.0, std: float = 1.0, dtype: Any = dtypes.float32
) -> Tensor:
    """Normal samples with the given mean and standard deviation."""
    attrs = {"shape": tuple(shape), "mean": mean, "std": std, "dtype": dtypes.as_dtype(dtype)}
    return create_op(r.RANDOM_NORMAL, [seed_tensor], attrs)[0]


def dropout(t: Tensor, seed_tensor: Tensor, p: float) -> Tensor:
    """`t` with elements zeroed with probability `p`, the rest scaled by 1/(1-p)."""
    return create_op(r.DROPOUT, [t, seed_tensor], {"p": float(p)})[0]


def shaped_dropout(t: Tensor, seed_tensor: Tensor, shape: Any, ratio: float) -> Tensor:
    """`t` with elements zeroed with probability `ratio` by a mask of `shape` broadcast to `t` (the rest scaled
    by 1 / (1 - ratio)): elements sharing a mask position are dropped together."""
    attrs = {"shape": tuple(shape), "ratio": float(ratio)}
    # popxl: `shapeddropout_out` (python/popxl/ops/shaped_dropout.py).
    return create_op(r.SHAPED_DROPOUT, [t, seed_tensor], attrs, names=["shapeddropout_out"])[0]
