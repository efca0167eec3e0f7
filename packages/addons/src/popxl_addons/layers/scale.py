"""Scale: multiply by a variable of the input's shape, initialised to 2."""

from __future__ import annotations

from functools import partial

import numpy as np

import popxl
from popxl_addons.core import Module

__all__ = ["Scale"]


class Scale(Module):
    """`x * scale` with a variable `scale` shaped like `x`, every element starting at 2."""

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        """`x * scale`."""
        scale = self.add_variable_input("scale", partial(np.full, x.shape, 2, x.dtype.as_numpy()), x.dtype)
        return x * scale
