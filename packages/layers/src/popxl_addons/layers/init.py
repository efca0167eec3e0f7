"""Initialisers for layer variables."""

from __future__ import annotations

from typing import Any

import numpy as np


def truncated_normal(shape: tuple[int, ...], std: float = 0.02, bound: float = 2.0) -> np.ndarray[Any, Any]:
    """Normal samples with standard deviation `std`, redrawn until within `bound` standard deviations."""
    z = np.random.standard_normal(shape)
    outside = np.abs(z) > bound
    while outside.any():
        z[outside] = np.random.standard_normal(int(outside.sum()))
        outside = np.abs(z) > bound
    return (z * std).astype(np.float32)
