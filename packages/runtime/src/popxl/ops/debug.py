"""Printing, renaming and copying tensors between IPUs (`popxl.ops`)."""

from __future__ import annotations

from typing import Literal

from popxl.op import create_op
from popxl.opdefs.debug import PRINT_TENSOR
from popxl.tensor import Tensor

FloatFormat = Literal["auto", "fixed", "scientific", "none"]


def print_tensor(
    t: Tensor,
    title: str | None = None,
    print_self: bool = True,
    print_gradient: bool = False,
    summarise_threshold: int = 1000,
    edge_items: int = 3,
    max_line_width: int = 75,
    digits: int = 8,
    float_format: FloatFormat = "auto",
    separator: str = " ",
    open_bracket: str = "[",
    close_bracket: str = "]",
) -> Tensor:
    """`t`, printed when the program runs (and its gradient, with `print_gradient`).

    Printed with NumPy's formatting under the given options, not poplar's: the
    values are the same, the layout may differ.
    """
    attrs = {
        "title": title if title is not None else f"print_{t.name}",
        "print_self": print_self,
        "print_gradient": print_gradient,
        "summarise_threshold": summarise_threshold,
        "edge_items": edge_items,
        "max_line_width": max_line_width,
        "digits": digits,
        "float_format": float_format,
        "separator": separator,
        "open_bracket": open_bracket,
        "close_bracket": close_bracket,
    }
    # popxl: `print_out` (python/popxl/ops/print_tensor.py).
    return create_op(PRINT_TENSOR, [t], attrs, names=["print_out"])[0]
