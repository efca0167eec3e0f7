"""NamedTensors: a DotTree of popxl tensors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

import popxl
from popxl import ops
from popxl_addons.core.modules.dot_tree import DotTree

__all__ = ["NamedTensors", "TensorMap", "print_named_tensors"]

# popxl-addons' name for a tensor-to-tensor mapping (what `NamedTensors.remap` takes).
TensorMap: TypeAlias = Mapping[popxl.Tensor, popxl.Tensor]


class NamedTensors(DotTree[popxl.Tensor]):
    """Tensors under dotted names, such as a module's variables."""

    @property
    def tensors(self) -> tuple[popxl.Tensor, ...]:
        """Every tensor, sorted by tensor name."""
        return tuple(sorted(self.values_flat(), key=lambda t: t.name))

    @property
    def named_tensors(self) -> dict[str, popxl.Tensor]:
        """Every tensor under its dotted name."""
        return self.to_dict()

    def remap(self, mapping: TensorMap) -> NamedTensors:
        """The same names with every tensor replaced by `mapping[tensor]` (KeyError if absent)."""
        result: NamedTensors = self.map(lambda t: mapping[t])
        return result


def print_named_tensors(named_tensors: NamedTensors) -> NamedTensors:
    """Each tensor printed when the program runs, titled by its dotted name (`popxl.ops.print_tensor`); the
    printed tensors, which must be used for the prints to stay in the program, under the same names."""
    return NamedTensors.from_dict({name: ops.print_tensor(t, name) for name, t in named_tensors.to_dict().items()})
