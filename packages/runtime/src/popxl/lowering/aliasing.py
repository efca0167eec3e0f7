"""Aliasing and in-place updates of one graph: the one model of which tensors share storage.

popxl ops may update an input in place: the op's output holding the new value
(`Aliasing.modifies`) then shares the input's storage. In-place view ops
(`Aliasing.view_update`: `reshape_`, `slice_`, `concat_`, ...) return a view that
shares the storage of the tensors it views. Calls and loops update the caller's
tensors for their by-reference inputs, declared through `modifies` too. This
module resolves, once per graph and before anything runs, the storage each
tensor uses and the storage roots (tensors that own their storage: graph
inputs, variables, outputs of ops that are neither views nor in-place) each op
writes. The interpreter reads and writes values through it, and the program
takes from it which variables a run writes, so the two cannot disagree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from popxl.graph import Graph
    from popxl.op import Op
    from popxl.tensor import Tensor


class Aliasing:
    """Which storage each tensor of a graph uses, and which storage roots its ops write."""

    def __init__(self, graph: Graph) -> None:
        # An in-place op's aliasing output -> the input whose storage it shares.
        self._same: dict[Tensor, Tensor] = {}
        # A view op's output -> the view op.
        self._views: dict[Tensor, Op] = {}
        self._written: dict[Tensor, None] = {}
        for op in graph.ops:
            for i in op.modifies:
                self._written.update(dict.fromkeys(self.roots(op.inputs[i])))
            if op.opdef.aliasing.view_update is not None:
                self._views[op.outputs[0]] = op
            for i, out in op.modifies.items():
                if out is not None:
                    self._same[op.outputs[out]] = op.inputs[i]

    def storage(self, t: Tensor) -> Tensor:
        """The tensor whose storage `t` uses: itself unless it is an in-place op's aliasing output."""
        while t in self._same:
            t = self._same[t]
        return t

    def view(self, t: Tensor) -> Op | None:
        """The view op whose output is the storage of `t`, or None when that storage is its own."""
        return self._views.get(self.storage(t))

    def owns_storage(self, t: Tensor) -> bool:
        """Whether `t` is a storage root: it is neither a view nor an in-place op's aliasing output."""
        return t not in self._same and t not in self._views

    def roots(self, t: Tensor) -> list[Tensor]:
        """The storage roots that hold the elements of `t` (several for a view of several tensors)."""
        view = self.view(t)
        if view is None:
            return [self.storage(t)]
        found: dict[Tensor, None] = {}
        for parent in view.inputs:
            found.update(dict.fromkeys(self.roots(parent)))
        return list(found)

    def written(self) -> list[Tensor]:
        """The storage roots the graph's ops update in place, in op order."""
        return list(self._written)
