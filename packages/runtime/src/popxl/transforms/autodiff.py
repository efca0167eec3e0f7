"""Reverse-mode autodiff of a popxl graph into a new gradient graph, as popxl defines it.

The gradient graph's inputs are, in order: one `FwdGrad` input per provided
gradient (in `grads_provided` order), then one `Fwd` input per forward tensor
whose value some gradient op needs, sorted by the forward tensor's full id as a
string. This is popxl's order (its backward-graph builder walks forward
tensors in an id-ordered map), and user code indexes into it. Only values a
gradient really needs become `Fwd` inputs. Forward tensors needed that are
neither inputs nor outputs of the forward graph are appended to its outputs
("stitched"), and every existing call site of the forward graph gains them too.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from popxl import context
from popxl.creation import constant
from popxl.errors import AutodiffError
from popxl.grad_builder import GradBuilder
from popxl.grad_info import ExpectedConnection, ExpectedConnectionType, GradGraphInfo
from popxl.graph import Graph, graph_input, graph_output
from popxl.op import Op
from popxl.opdefs.call import CALL
from popxl.ops.call import call
from popxl.ops.elementwise import add
from popxl.tensor import Tensor

__all__ = [
    "AutodiffError",
    "ExpectedConnection",
    "ExpectedConnectionType",
    "GradGraphInfo",
    "autodiff",
    "call_grad",
    "contributes_to",
    "depends_on",
    "grad_graph",
]


def depends_on(graph: Graph, required: Iterable[Tensor]) -> set[Tensor]:
    """The tensors of `graph` that depend on any of `required`."""
    depends = set(required)
    for op in graph.ops:
        if any(t in depends for t in op.inputs):
            depends.update(op.outputs)
    return depends


def contributes_to(graph: Graph, provided: Iterable[Tensor]) -> set[Tensor]:
    """The tensors of `graph` that any of `provided` depends on."""
    contributes = set(provided)
    for op in reversed(graph.ops):
        if any(t in contributes for t in op.outputs):
            contributes.update(op.inputs)
    return contributes


def _stitch(forward: Graph, needed: Sequence[Tensor]) -> None:
    """Make every needed forward tensor an output of `forward` (and so of each op running it)."""
    present = set(forward.inputs) | set(forward.outputs)
    for t in needed:
        if t in present:
            continue
        try:
            forward.add_output(t)
        except ValueError as e:
            raise AutodiffError(f"Cannot make {t.id} available to the gradient graph: {e}") from e
        present.add(t)


def _backward(gb: GradBuilder, forward: Graph, grads: dict[Tensor, Tensor]) -> None:
    """Add the gradient ops of `forward`'s ops, last first, accumulating into `grads`; only the tensors
    `gb.wants` (those between the required and the provided ones) get gradients."""
    for op in reversed(forward.ops):
        out_grads = [grads.get(t) for t in op.outputs]
        if all(g is None for g in out_grads) or not any(gb.wants(t) for t in op.inputs):
            continue
        if op.opdef.grad is None:
            raise AutodiffError(f"Op kind '{op.name}' has no gradient rule ({op})")
        in_grads = op.opdef.grad(gb, op, out_grads)
        for t, g in zip(op.inputs, in_grads):
            if g is None or not gb.wants(t):
                continue
            grads[t] = add(grads[t], g) if t in grads else g


def grad_graph(
    forward: Graph,
    provided: Sequence[Tensor],
    required: Sequence[Tensor],
    called_infos: dict[Graph, GradGraphInfo],
    strict: bool = True,
) -> GradGraphInfo:
    """The gradient graph of `forward` for `required` from `provided`, recorded in `called_infos`.

    With `strict`, a required tensor with no path to `provided` is an error (popart's top-level autodiff);
    without, it is left out of the outputs and expected outputs, as popart's autodiff of a called graph
    leaves out the inputs that do not reach its outputs."""
    ir = forward.ir
    backward = ir.create_empty_graph(f"{forward.name}_grad")
    depends = depends_on(forward, required)
    contributes = contributes_to(forward, provided)
    gb = GradBuilder(forward, depends & contributes, called_infos)
    grads: dict[Tensor, Tensor] = {}
    with backward, context.fresh_name_scopes():
        grad_inputs = [graph_input(t.shape, t.dtype, f"Gradient___{t.name}", meta_shape=t.meta_shape) for t in provided]
        for t, g in zip(provided, grad_inputs):
            if t not in depends:
                warnings.warn(f"The provided gradient of {t.id} does not reach any required gradient", stacklevel=3)
            grads[t] = add(grads[t], g) if t in grads else g
        _backward(gb, forward, grads)
        if strict:
            for t in required:
                if t not in grads:
                    raise AutodiffError(
                        f"[Autodiff] Unable to provide required gradient output for fwd id {t.id}: "
                        f"it does not lead to any of the provided gradients"
                    )
        given = [t for t in required if t in grads]
        for t in given:
            graph_output(grads[t])
    activations = sorted(gb.activations, key=lambda t: t.id.encode())
    backward.reorder_inputs(grad_inputs + [gb.activations[t] for t in activations])
    _stitch(forward, activations)
    expected_inputs = [ExpectedConnection.create(t, ExpectedConnectionType.FwdGrad) for t in provided] + [
        ExpectedConnection.create(t, ExpectedConnectionType.Fwd) for t in activations
    ]
    expected_outputs = [ExpectedConnection.create(t, ExpectedConnectionType.FwdGrad) for t in given]
    info = GradGraphInfo.create(backward, forward, expected_inputs, expected_outputs)
    info.without_gradient = frozenset(required) - frozenset(given)
    called_infos[forward] = info
    return info


def call_grad(gb: GradBuilder, op: Op, out_grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """Gradient rule of `call`: differentiate the called graph and call its gradient graph."""
    sub: Graph = op.attrs["graph"]
    wanted = [i for i, t in enumerate(op.inputs) if gb.wants(t)]
    sub_inputs = sub.inputs
    needed = [sub_inputs[i] for i in wanted]
    # A known gradient graph serves if it gives every needed gradient that exists (extra ones are left unused).
    info = gb.called_infos.get(sub)
    covered = {id(t) for t in [*info.outputs, *info.without_gradient]} if info is not None else set()
    if info is None or any(id(t) not in covered for t in needed):
        if not sub.recursive_autodiff:
            missing = "no gradient graph" if info is None else "a gradient graph without all the gradients needed"
            raise AutodiffError(
                f"{sub.id!r} is marked as unsafe to autodiff recursively (its gradient is user-defined) and has "
                f"{missing}: pass its gradient graph in `called_graphs_grad_info`"
            )
        provided = [o for o in sub.outputs if o.dtype.is_floating_point]
        # As popart: a called graph's inputs that do not reach its outputs get no gradient, not an error.
        info = grad_graph(sub, provided, needed, gb.called_infos, strict=False)
    # Positions in the called graph, built once (an output listed twice is found at its first place).
    input_at = {t: i for i, t in enumerate(sub_inputs)}
    output_at: dict[Tensor, int] = {}
    for i, t in enumerate(sub.outputs):
        output_at.setdefault(t, i)
    feeds: list[Tensor] = []
    for ec in info.expected_inputs:
        t = ec.fwd_tensor
        if ec.connection_type is ExpectedConnectionType.FwdGrad:
            g = out_grads[output_at[t]] if t in output_at else None
            feeds.append(g if g is not None else constant(np.zeros(t.shape, t.dtype.as_numpy()), t.dtype))
        elif t in input_at:
            feeds.append(gb.fwd(op.inputs[input_at[t]]))
        else:
            feeds.append(gb.fwd(op.outputs[output_at[t]]))
    results = call(info.graph, *feeds)
    grads: list[Tensor | None] = [None] * len(op.inputs)
    for k, ec in enumerate(info.expected_outputs):
        grads[input_at[ec.fwd_tensor]] = results[k]
    return grads


CALL.define_grad(call_grad)


def autodiff(
    graph: Graph,
    grads_provided: Iterable[Tensor] | None = None,
    grads_required: Iterable[Tensor] | None = None,
    called_graphs_grad_info: dict[Graph, GradGraphInfo] | None = None,
    return_all_grad_graphs: bool = False,
) -> Any:
    """The gradient graph of `graph` (a GradGraphInfo), or every one built, keyed by forward graph."""
    provided = list(graph.outputs if grads_provided is None else grads_provided)
    required = list(graph.inputs if grads_required is None else grads_required)
    for t in [*provided, *required]:
        if t.graph is not graph:
            raise ValueError(f"{t.id} is not a tensor of graph {graph.id!r}")
    infos = dict(called_graphs_grad_info or {})
    infos.pop(graph, None)
    info = grad_graph(graph, provided, required, infos)
    return infos if return_all_grad_graphs else info
