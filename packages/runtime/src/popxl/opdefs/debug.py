"""Printing tensors while a program runs, to standard error as poplar prints them."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax
import numpy as np

from popxl.op import Attrs, Op, OpDef, create_op, register
from popxl.opdefs.common import like_input
from popxl.tensor import Tensor

if TYPE_CHECKING:
    from popxl.grad_builder import GradBuilder
    from popxl.lowering.interpreter import LoweringContext


# Replicas on several devices print concurrently: one at a time, so that their lines do not interleave.
_PRINTING = threading.Lock()


def _show(title: str, attrs: Attrs, value: np.ndarray) -> None:
    options = {"threshold": attrs["summarise_threshold"], "edgeitems": attrs["edge_items"]}
    options |= {"linewidth": attrs["max_line_width"], "precision": attrs["digits"]}
    with np.printoptions(**options):
        text = np.array2string(np.asarray(value), separator=attrs["separator"])
    line = (
        f"{title}: {attrs['open_bracket']}{text[1:-1]}{attrs['close_bracket']}"
        if text.startswith("[")
        else f"{title}: {text}"
    )
    with _PRINTING:
        print(line, file=sys.stderr, flush=True)


def _lower(ctx: LoweringContext, attrs: Attrs, x: jax.Array) -> list[jax.Array]:
    if not (attrs["print_self"] and ctx.host_effects):
        return [x]
    if ctx.mesh.replication_factor == 1:
        jax.debug.callback(lambda v: _show(attrs["title"], attrs, v), x, ordered=False)
    else:
        # As poplar, every replica prints its own value, titled `<title>_replica_<index>`. The index is an
        # argument so that a value the replicas share (not batched over them) is printed by each all the same.
        def show(index: np.ndarray, v: np.ndarray) -> None:
            _show(f"{attrs['title']}_replica_{int(index)}", attrs, v)

        jax.debug.callback(show, ctx.mesh.replica_index(), x, ordered=False)
    return [x]


def _grad(gb: GradBuilder, op: Op, out_grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    (dy,) = out_grads
    if dy is None or not op.attrs["print_gradient"]:
        return [dy]
    attrs = {**op.attrs, "title": f"{op.attrs['title']}_gradient", "print_self": True, "print_gradient": False}
    return [create_op(PRINT_TENSOR, [dy], attrs)[0]]


PRINT_TENSOR = register(
    OpDef(
        "print_tensor",
        like_input(0),
        _lower,
        grad=_grad,
        output_names=("print_tensor_out",),
        departure="printed with NumPy's formatting",
    )
)
