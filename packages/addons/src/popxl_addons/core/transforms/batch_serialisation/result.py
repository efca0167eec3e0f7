"""What batch serialisation returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import popxl
from popxl_addons.core.modules.graph import GraphWithNamedArgs
from popxl_addons.core.modules.named_tensors import NamedTensors
from popxl_addons.core.modules.variable_factory import NamedVariableFactories
from popxl_addons.core.transforms.batch_serialisation.handles import RemoteHandle


@dataclass
class BatchSerialResult:
    """The serialised graph, where each stored tensor went, and the input remapping.

    `graph` takes the row (int32) first, then the seed if one was given, then
    the passed-through inputs of the original graph; its args are the original
    args remapped to them. `kept` holds the factories of the device stacks
    the result's args name (see `batch_serialise_fwd_and_grad`).
    """

    graph: GraphWithNamedArgs
    stored_buffers: dict[popxl.Tensor, RemoteHandle] = field(default_factory=dict)
    _remap_dict: dict[popxl.Tensor, popxl.Tensor] = field(default_factory=dict)
    kept: NamedVariableFactories = field(default_factory=NamedVariableFactories)

    def remap_tensors(self, ts: NamedTensors) -> NamedTensors:
        """`ts` with original-graph inputs replaced by the serialised graph's inputs."""
        return ts.remap(self._remap_dict)
