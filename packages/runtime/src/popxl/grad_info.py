"""How a gradient graph connects to its forward graph: popxl's GradGraphInfo and expected connections."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from popxl.graph import Graph
from popxl.ops.call import CallSiteInfo
from popxl.tensor import Tensor


class ExpectedConnectionType(Enum):
    """What a gradient-graph input or output connects to in the forward graph."""

    Fwd = "Fwd"
    FwdGrad = "FwdGrad"


class ExpectedConnection:
    """A forward tensor and whether its value (Fwd) or its gradient (FwdGrad) is meant."""

    def __init__(self) -> None:
        raise TypeError("ExpectedConnection is created by autodiff or ExpectedConnection.create, not directly")

    @classmethod
    def create(cls, fwd_tensor: Tensor, connection_type: ExpectedConnectionType) -> ExpectedConnection:
        """The connection to `fwd_tensor`'s value (Fwd) or gradient (FwdGrad), for a gradient graph written
        by hand (popxl builds these from popart's `ExpectedConnection`)."""
        if not isinstance(fwd_tensor, Tensor):
            raise TypeError(f"ExpectedConnection.create: fwd_tensor must be a popxl Tensor, got {fwd_tensor!r}")
        if not isinstance(connection_type, ExpectedConnectionType):
            raise TypeError(
                f"ExpectedConnection.create: connection_type must be an ExpectedConnectionType, got {connection_type!r}"
            )
        return cls._create(fwd_tensor, connection_type)

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
        raise TypeError("GradGraphInfo is created by autodiff or GradGraphInfo.create, not directly")

    @classmethod
    def create(
        cls,
        graph: Graph,
        forward_graph: Graph,
        expected_inputs: Iterable[ExpectedConnection],
        expected_outputs: Iterable[ExpectedConnection],
    ) -> GradGraphInfo:
        """The info of a gradient graph written by hand: `expected_inputs` describe its first inputs in order
        (later inputs, such as accumulators, connect to nothing of the forward graph), `expected_outputs` its
        outputs in order; every connection is to a tensor of `forward_graph`."""
        ins, outs = list(expected_inputs), list(expected_outputs)
        if len(ins) > len(graph.inputs):
            raise ValueError(
                f"GradGraphInfo.create: {len(ins)} expected inputs for the {len(graph.inputs)} inputs of {graph.id!r}"
            )
        for ec in [*ins, *outs]:
            if not isinstance(ec, ExpectedConnection):
                raise TypeError(f"GradGraphInfo.create: expected an ExpectedConnection, got {ec!r}")
            if ec.fwd_tensor not in forward_graph:
                raise ValueError(
                    f"GradGraphInfo.create: {ec.fwd_tensor.id!r} of {ec!r} is not a tensor of the forward graph "
                    f"{forward_graph.id!r}"
                )
        return cls._create(graph, forward_graph, ins, outs)

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
    # Forward tensors autodiff was asked for that have no gradient (a called graph's inputs that do not
    # reach its outputs), so that a call asking for them again reuses this graph.
    without_gradient: frozenset[Tensor] = frozenset()

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
