"""Matrix products of `popxl.ops`."""

from __future__ import annotations

from typing import Any

from popxl import dtypes, ipu_only
from popxl.op import create_op
from popxl.opdefs import linalg
from popxl.tensor import Tensor


def matmul(
    lhs: Tensor,
    rhs: Tensor,
    available_memory_proportion: float | None = None,
    output_type: Any | None = None,
    partials_type: Any | None = None,
) -> Tensor:
    """Matrix product with NumPy's broadcasting rules, in `lhs`'s type unless `output_type` is given.

    `available_memory_proportion` and `partials_type` tune the IPU's matmul and change nothing here.
    """
    attrs = {"output_type": dtypes.as_dtype(output_type) if output_type is not None else None}
    out = create_op(linalg.MATMUL, [lhs, rhs], attrs)[0]
    ipu_only.record(out, available_memory_proportion=available_memory_proportion, partials_type=partials_type)
    return out
