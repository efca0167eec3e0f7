"""Seed tensors for popxl's random ops: a uint64 held as two uint32 words."""

from __future__ import annotations

import numpy as np

_UINT32 = 2**32


def uint64_to_two_uint32(num: int) -> tuple[int, int]:
    """The most and least significant 32 bits of the uint64 `num`."""
    if not 0 <= num < _UINT32 * _UINT32:
        raise ValueError(f"Number is negative or cannot be represented as a uint64: {num}")
    return num // _UINT32, num % _UINT32


def two_uint32_to_uint64(a: int, b: int) -> int:
    """The uint64 whose most significant 32 bits are `a` and least significant `b`."""
    if not (0 <= a < _UINT32 and 0 <= b < _UINT32):
        raise ValueError(f"Either `a` or `b` are negative or cannot be represented as a uint32: {a}, {b}")
    return a * _UINT32 + b


def create_seeds(
    seed: int, offset: int = 0, batches_per_step: int = 1, gradient_accumulation_factor: int = 1, replicas: int = 1
) -> np.ndarray:
    """Seed tensors drawn from `seed + offset`, shaped `[batches_per_step, gradient_accumulation_factor,
    replicas, 2]` with axes of size one dropped, as popxl draws them."""
    count = batches_per_step * gradient_accumulation_factor * replicas
    draws = np.random.default_rng(seed + offset).integers(0, 2**64 - 1, endpoint=True, dtype=np.uint64, size=count)
    words = np.array([uint64_to_two_uint32(int(d)) for d in draws], dtype=np.uint32)
    return np.squeeze(words.reshape(batches_per_step, gradient_accumulation_factor, replicas, 2))
