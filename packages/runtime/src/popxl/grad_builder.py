"""State of one backward pass: forward values the gradient graph asks for, and accumulated gradients."""

from __future__ import annotations

from popxl.creation import constant
from popxl.grad_info import GradGraphInfo
from popxl.graph import Graph, graph_input
from popxl.tensor import Constant, Tensor


class GradBuilder:
    """Passed to gradient rules: maps forward tensors into the gradient graph.

    `fwd(t)` gives the gradient graph's input holding forward value `t`
    (created on first use: these are the gradient graph's activations);
    `wants(t)` says whether a gradient for forward tensor `t` is needed.
    """

    def __init__(
        self,
        forward: Graph,
        depends: set[Tensor],
        called_infos: dict[Graph, GradGraphInfo],
    ) -> None:
        self.forward = forward
        self.depends = depends
        self.called_infos = called_infos
        self.activations: dict[Tensor, Tensor] = {}

    def wants(self, t: Tensor) -> bool:
        """Whether the backward pass needs the gradient of forward tensor `t`."""
        return t in self.depends and t.dtype.is_floating_point

    def fwd(self, t: Tensor) -> Tensor:
        """The gradient graph's tensor holding the forward value of `t`."""
        if t.graph is not self.forward:
            raise ValueError(f"{t.id} is not a tensor of the forward graph {self.forward.id!r}")
        if isinstance(t, Constant):
            return constant(t.data, t.dtype, t.name.split("/")[-1])
        if t not in self.activations:
            self.activations[t] = graph_input(t.shape, t.dtype, t.name, meta_shape=t.meta_shape)
        return self.activations[t]
