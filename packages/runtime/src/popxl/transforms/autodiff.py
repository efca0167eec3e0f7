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
from enum import Enum
from typing import Any

import numpy as np

from popxl import context
from popxl.creation import constant
from popxl.graph import Graph, graph_input, graph_output
from popxl.op import Op
from popxl.ops.call import CallSiteInfo, call
from popxl.ops.maths import add
from popxl.tensor import Tensor
from popxl.transforms.grad_builder import GradBuilder


class AutodiffError(RuntimeError):
    """A gradient that cannot be built."""


class ExpectedConnectionType(Enum):
    """What a gradient-graph input or output connects to in the forward graph."""

    Fwd = "Fwd"
    FwdGrad = "FwdGrad"


class ExpectedConnection:
    """A forward tensor and whether its value (Fwd) or its gradient (FwdGrad) is meant."""

    def __init__(self) -> None:
        raise TypeError("ExpectedConnection is created by autodiff, not directly")

    @classmethod
    def _create(cls, fwd_tensor: Tensor, connection_type: ExpectedConnectionType) -> ExpectedConnection:
        ec = cls.__new__(cls)
        ec.fwd_tensor = fwd_tensor
        ec.connection_type = connection_type
        return ec

    fwd_tensor: Tensor
    connection_type: ExpectedConnectionType

    def __repr__(self) -> str:
        return f"({self.connection_type.name}, {self.fwd_tensor.id})"


class GradGraphInfo:
    """A gradient graph and how its inputs and outputs connect to the forward graph."""

    def __init__(self) -> None:
        raise TypeError("GradGraphInfo is created by autodiff, not directly")

    @classmethod
    def _create(
        cls,
        graph: Graph,
        forward_graph: Graph,
        expected_inputs: list[ExpectedConnection],
        expected_outputs: list[ExpectedConnection],
    ) -> GradGraphInfo:
        info = cls.__new__(cls)
        info.graph = graph
        info.forward_graph = forward_graph
        info._expected_inputs = expected_inputs
        info._expected_outputs = expected_outputs
        return info

    graph: Graph
    forward_graph: Graph
    _expected_inputs: list[ExpectedConnection]
    _expected_outputs: list[ExpectedConnection]

    @property
    def expected_inputs(self) -> tuple[ExpectedConnection, ...]:
        """What each gradient-graph input (from index 0) connects to."""
        return tuple(self._expected_inputs)

    @property
    def expected_outputs(self) -> tuple[ExpectedConnection, ...]:
        """What each gradient-graph output connects to (all FwdGrad)."""
        return tuple(self._expected_outputs)

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """The forward tensors of the expected inputs."""
        return tuple(ec.fwd_tensor for ec in self._expected_inputs)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """The forward tensors of the expected outputs."""
        return tuple(ec.fwd_tensor for ec in self._expected_outputs)

    def inputs_dict(self, fwd_call_info: CallSiteInfo) -> dict[Tensor, Tensor]:
        """Gradient-graph Fwd inputs mapped to the parent tensors of a forward call."""
        if fwd_call_info.called_graph is not self.forward_graph:
            raise TypeError(
                f"The call info is of {fwd_call_info.called_graph.id!r}, not of the forward graph "
                f"{self.forward_graph.id!r}"
            )
        return {
            self.graph.inputs[i]: fwd_call_info.graph_to_parent(ec.fwd_tensor)
            for i, ec in enumerate(self._expected_inputs)
            if ec.connection_type is ExpectedConnectionType.Fwd
        }

    def fwd_graph_ins_to_grad_parent_outs(self, grad_call_info: CallSiteInfo) -> dict[Tensor, Tensor]:
        """Forward-graph tensors mapped to the parent tensors holding their gradients."""
        return {
            ec.fwd_tensor: grad_call_info.graph_to_parent(self.graph.outputs[i])
            for i, ec in enumerate(self._expected_outputs)
            if i < len(self.graph.outputs)
        }

    def fwd_parent_ins_to_grad_parent_outs(
        self, fwd_call_info: CallSiteInfo, grad_call_info: CallSiteInfo
    ) -> dict[Tensor, Tensor]:
        """Forward call-site tensors mapped to the parent tensors holding their gradients."""
        return {
            fwd_call_info.graph_to_parent(t): g
            for t, g in self.fwd_graph_ins_to_grad_parent_outs(grad_call_info).items()
        }


def depends_on(graph: Graph, required: Iterable[Tensor]) -> set[Tensor]:
    depends = set(required)
    for op in graph.ops:
        if any(t in depends for t in op.inputs):
            depends.update(op.outputs)
    return depends


def contributes_to(graph: Graph, provided: Iterable[Tensor]) -> set[Tensor]:
    contributes = set(provided)
    for op in reversed(graph.ops):
        if any(t in contributes for t in op.outputs):
            contributes.update(op.inputs)
    return contributes


def _stitch(forward: Graph, needed: Sequence[Tensor]) -> None:
    """Make every needed forward tensor an output of `forward` and of each call of it."""
    present = set(forward.inputs) | set(forward.outputs)
    for t in needed:
        if t in present:
            continue
        for site in forward._call_sites:
            if site.name != "call":
                raise AutodiffError(
                    f"Cannot add {t.id} to the outputs of {forward.id!r}: it is used by a {site.name} op"
                )
        forward._add_output(t)
        present.add(t)
        for site in forward._call_sites:
            parent = site.graph
            out = Tensor(parent, t.name, t.spec)
            out.producer = site
            site.outputs.append(out)


def _backward(gb: GradBuilder, forward: Graph, grads: dict[Tensor, Tensor], wanted: set[Tensor]) -> None:
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
) -> GradGraphInfo:
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
        _backward(gb, forward, grads, depends)
        for t in required:
            if t not in grads:
                raise AutodiffError(
                    f"[Autodiff] Unable to provide required gradient output for fwd id {t.id}: "
                    f"it does not lead to any of the provided gradients"
                )
            graph_output(grads[t])
    activations = sorted(gb.activations, key=lambda t: t.id.encode())
    backward._inputs = grad_inputs + [gb.activations[t] for t in activations]
    _stitch(forward, activations)
    expected_inputs = [ExpectedConnection._create(t, ExpectedConnectionType.FwdGrad) for t in provided] + [
        ExpectedConnection._create(t, ExpectedConnectionType.Fwd) for t in activations
    ]
    expected_outputs = [ExpectedConnection._create(t, ExpectedConnectionType.FwdGrad) for t in required]
    info = GradGraphInfo._create(backward, forward, expected_inputs, expected_outputs)
    called_infos[forward] = info
    return info


def call_grad(gb: GradBuilder, op: Op, out_grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """Gradient rule of `call`: differentiate the called graph and call its gradient graph."""
    sub: Graph = op.attrs["graph"]
    wanted = [i for i, t in enumerate(op.inputs) if gb.wants(t)]
    info = gb.called_infos.get(sub)
    if info is None or [ec.fwd_tensor for ec in info.expected_outputs] != [sub.inputs[i] for i in wanted]:
        provided = [o for o in sub.outputs if o.dtype.is_floating_point]
        info = grad_graph(sub, provided, [sub.inputs[i] for i in wanted], gb.called_infos)
    feeds: list[Tensor] = []
    for ec in info.expected_inputs:
        t = ec.fwd_tensor
        if ec.connection_type is ExpectedConnectionType.FwdGrad:
            g = out_grads[sub._outputs.index(t)] if t in sub._outputs else None
            feeds.append(g if g is not None else constant(np.zeros(t.shape, t.dtype.as_numpy()), t.dtype))
        elif t in sub._inputs:
            feeds.append(gb.fwd(op.inputs[sub._inputs.index(t)]))
        else:
            feeds.append(gb.fwd(op.outputs[sub._outputs.index(t)]))
    results = call(info.graph, *feeds)
    grads: list[Tensor | None] = [None] * len(op.inputs)
    for k, ec in enumerate(info.expected_outputs):
        grads[sub._inputs.index(ec.fwd_tensor)] = results[k]
    return grads


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
