"""NamedTensors: a DotTree of popxl tensors."""

from __future__ import annotations

from collections.abc import Mapping

import popxl
from popxl_addons.core.dot_tree import DotTree


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

    def remap(self, mapping: Mapping[popxl.Tensor, popxl.Tensor]) -> NamedTensors:
        """The same names with every tensor replaced by `mapping[tensor]` (KeyError if absent)."""
        result: NamedTensors = self.map(lambda t: mapping[t])
        return result
