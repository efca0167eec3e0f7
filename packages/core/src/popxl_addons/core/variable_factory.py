"""Variable factories: how to create a module's variables, and their graph inputs."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

import popxl
from popxl import ops
from popxl_addons.core.dot_tree import DotTree
from popxl_addons.core.named_tensors import NamedTensors


def _draws(data_iter: Callable[[], Any] | Iterable[Any]) -> Iterator[Any]:
    if callable(data_iter):
        try:
            data_iter()
        except Exception as e:
            raise ValueError(f"Passed callable via `data_iter` throws error: {e!r}") from e
        fn = data_iter
        return (fn() for _ in iter(int, 1))
    if isinstance(data_iter, Iterable):
        return iter(data_iter)
    raise ValueError(f"`data_iter` must be a callable or an iterable, got {data_iter!r}")


class VariableFactory:
    """Creates one variable (or graph input) per use from a data source.

    `data_iter` is a callable, called for each new variable, or an iterable
    consumed one item per variable.
    """

    def __init__(
        self,
        data_iter: Callable[[], Any] | Iterable[Any],
        dtype: Any | None = None,
        name: str | None = None,
        by_ref: bool = False,
        replica_grouping: popxl.ReplicaGrouping | None = None,
        shard_over: int = 1,
    ) -> None:
        self._draws = _draws(data_iter)
        first = next(self._draws)
        if not isinstance(first, np.ndarray | np.generic | int | float | bool):
            raise ValueError(f"`data_iter` must give NumPy arrays or scalars, got {type(first).__name__}")
        self._peeked: list[Any] = [first]
        data = np.asarray(first)
        self.dtype = popxl.dtypes.as_dtype(dtype if dtype is not None else data)
        self.name = name
        self.by_ref = by_ref
        self.replica_grouping = replica_grouping if replica_grouping is not None else popxl.gir().replica_grouping()
        if shard_over > self.replica_grouping.group_size:
            raise AssertionError(f"shard_over={shard_over} exceeds the group size {self.replica_grouping.group_size}")
        self.shard_over = shard_over
        if shard_over > 1:
            self.meta_shape: tuple[int, ...] = data.shape
            self.shape: tuple[int, ...] = (math.prod(data.shape) // shard_over,)
        else:
            self.meta_shape, self.shape = (), data.shape

    def _next(self) -> np.ndarray[Any, Any]:
        item = self._peeked.pop() if self._peeked else next(self._draws)
        return np.asarray(item).astype(self.dtype.as_numpy())

    def create_input(self, prefix: str | None = None) -> popxl.Tensor:
        """A graph input of the current graph for this variable."""
        name = f"{prefix}.{self.name}" if prefix and self.name else (self.name or prefix)
        return popxl.graph_input(self.shape, self.dtype, name, self.by_ref, self.meta_shape)

    def create_tensor(self, name: str | None = None) -> popxl.Variable:
        """A new main-graph variable (data stacked per group when grouped)."""
        groups = self.replica_grouping.num_groups
        data = np.stack([self._next() for _ in range(groups)]) if groups > 1 else self._next()
        return popxl.variable(data, self.dtype, name or self.name, replica_grouping=self.replica_grouping)


class NamedVariableFactories(DotTree[VariableFactory]):
    """Variable factories under dotted names."""

    def init(self, prefix: str | None = None) -> NamedTensors:
        """Create every variable (in key order), named by its dotted key."""
        tensors = NamedTensors()
        for key, factory in sorted(self.to_dict().items()):
            name = f"{prefix}.{key}" if prefix else key
            tensors.insert(key, factory.create_tensor(name), overwrite=True)
        return tensors

    def init_zero(self) -> NamedTensors:
        """Zero-initialised tensors of the current graph with each factory's spec."""
        return self._init("zero")

    def init_undef(self) -> NamedTensors:
        """Uninitialised tensors of the current graph with each factory's spec."""
        return self._init("undef")

    def _init(self, init_type: str) -> NamedTensors:
        return NamedTensors.from_dict(
            {k: ops.init(f.shape, f.dtype, f.name, init_type, f.meta_shape) for k, f in self.to_dict().items()}
        )


def add_variable_input(
    name: str,
    data_iter: Callable[[], Any] | Iterable[Any],
    dtype: Any | None = None,
    by_ref: bool = False,
    replica_grouping: popxl.ReplicaGrouping | None = None,
    shard_over: int = 1,
) -> tuple[popxl.Tensor, VariableFactory]:
    """A graph input of the current graph and the factory for its variable."""
    factory = VariableFactory(data_iter, dtype, name, by_ref, replica_grouping, shard_over)
    return factory.create_input(), factory
