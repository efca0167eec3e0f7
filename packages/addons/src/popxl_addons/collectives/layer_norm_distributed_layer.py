"""popxl-addons' `LayerNormDistributed` layer: a layer norm of an input whose hidden axis is sharded.

It lives beside its collective op, and `popxl_addons.collectives` offers the two together; popxl-addons'
path `popxl_addons.layers.layer_norm_distributed` re-exports it from here. The layers may import the
collectives so, as the collectives import nothing of the layers: no import circle.
"""

from __future__ import annotations

from functools import partial

import numpy as np

import popxl
from popxl_addons.collectives.layer_norm_distributed import layer_norm_distributed
from popxl_addons.core import Module

__all__ = ["LayerNormDistributed"]


class LayerNormDistributed(Module):
    """Layer norm of an `(N, H / group_size)` input whose hidden axis is sharded over the replicas of
    `replica_grouping` (default: all replicas).

    Its `weight` and `bias` (ones and zeros) are sharded the same way: each replica of a group holds its
    own slice, and the replicas that hold the same slice (the transposed grouping) share its value, as in
    popxl-addons.
    """

    def __init__(self, replica_grouping: popxl.ReplicaGrouping | None = None) -> None:
        super().__init__()
        self.replica_grouping = replica_grouping

    def build(self, x: popxl.Tensor, eps: float = 1e-5) -> popxl.Tensor:
        """`x` normalised over the whole hidden axis of its group, then scaled by `weight` and shifted by `bias`."""
        group = self.replica_grouping if self.replica_grouping is not None else popxl.gir().replica_grouping()
        width = x.shape[-1]
        shared = group.transpose()
        w = self.add_variable_input("weight", partial(np.ones, width), x.dtype, replica_grouping=shared)
        b = self.add_variable_input("bias", partial(np.zeros, width), x.dtype, replica_grouping=shared)
        return layer_norm_distributed(x, w, b, epsilon=eps, group=group)
