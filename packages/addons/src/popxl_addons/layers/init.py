"""Initialisers for layer variables."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.random.mtrand import get_bit_generator
from numpy.typing import DTypeLike

Seed = int | np.random.Generator | None


def _generator(seed: Seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        # numpy's global state (the one `np.random.seed` sets) through the Generator API, which unlike the
        # legacy functions draws float32 directly.
        return np.random.Generator(get_bit_generator())
    return np.random.default_rng(seed)


def _normal(rng: np.random.Generator, size: int | tuple[int, ...], double: bool) -> np.ndarray[Any, Any]:
    if double:
        return rng.standard_normal(size, dtype=np.float64)
    return rng.standard_normal(size, dtype=np.float32)


def _outside(z: np.ndarray[Any, Any], bound: float) -> np.ndarray[Any, Any]:
    # Two boolean passes rather than np.abs, which would make a temporary as large as `z`.
    mask: np.ndarray[Any, Any] = np.greater(z, bound)
    np.logical_or(mask, np.less(z, -bound), out=mask)
    return mask


def truncated_normal(
    shape: int | tuple[int, ...],
    std: float = 0.02,
    bound: float = 2.0,
    *,
    mean: float = 0.0,
    dtype: DTypeLike = np.float32,
    seed: Seed = None,
) -> np.ndarray[Any, Any]:
    """`mean` plus normal samples of standard deviation `std`, each redrawn until within `bound` standard
    deviations (popxl-addons' `truncnorm.rvs(-bound, bound, loc=mean, scale=std)`), made in `dtype`.

    The draws come from numpy's global random state (`np.random.seed`) unless `seed`, an int or a
    Generator, is given. They are float32 (float64 for a float64 `dtype`; other float dtypes are cast
    once from float32), so a seed gives other values than the float64 draws of popxl-addons' scipy
    `truncnorm` and of this function before it drew float32.
    """
    target = np.dtype(dtype)
    double = target == np.float64
    rng = _generator(seed)
    z = _normal(rng, shape, double)
    flat = z.reshape(-1)  # a view: z is new and contiguous
    # Redraw only the entries outside the bounds: each round over those still outside (~4.6% at 2 std).
    redo = np.flatnonzero(_outside(flat, bound))
    while redo.size:
        fresh = _normal(rng, redo.size, double)
        flat[redo] = fresh
        redo = redo[_outside(fresh, bound)]
    z *= std
    if mean:
        z += mean
    # Float32 and float64 are drawn as they are; other dtypes are cast once from float32.
    return z if z.dtype == target else z.astype(target)


class TruncatedNormal:
    """`truncated_normal` as a variable factory's data source: it states its shape and dtype, so the factory
    draws only when it makes a variable, once per variable (a
    `popxl_addons.core.modules.variable_factory.SizedSource`)."""

    def __init__(
        self,
        shape: int | tuple[int, ...],
        std: float = 0.02,
        bound: float = 2.0,
        *,
        mean: float = 0.0,
        dtype: DTypeLike = np.float32,
        seed: Seed = None,
    ) -> None:
        self.shape: tuple[int, ...] = (shape,) if isinstance(shape, int) else tuple(shape)
        self.dtype: np.dtype[Any] = np.dtype(dtype)
        self.std, self.bound, self.mean, self.seed = std, bound, mean, seed

    def __call__(self) -> np.ndarray[Any, Any]:
        """New values (different ones each call unless `seed` is an int), read-only: a variable made from
        them holds them as they are, without a copy."""
        values = truncated_normal(self.shape, self.std, self.bound, mean=self.mean, dtype=self.dtype, seed=self.seed)
        values.flags.writeable = False
        return values

    def __repr__(self) -> str:
        return (
            f"TruncatedNormal({self.shape}, std={self.std}, bound={self.bound}, mean={self.mean}, "
            f"dtype={self.dtype}, seed={self.seed!r})"
        )
