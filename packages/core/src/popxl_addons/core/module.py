"""Module: builds a graph and records the variables it needs, with nested names."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import popxl
from popxl_addons.core.graph import GraphWithNamedArgs
from popxl_addons.core.named_tensors import NamedTensors
from popxl_addons.core.variable_factory import NamedVariableFactories, VariableFactory

# Modules whose build is running, innermost last: a submodule merges its variables into its parent's.
_building: list[Module] = []


class Module(popxl.Module):
    """A popxl Module whose variables become named graph inputs.

    Submodules assigned as attributes build under their attribute's name scope,
    and their variables nest under that name.
    """

    def __init__(self) -> None:
        self._scope_name: str | None = None
        self._reset()

    def _reset(self) -> None:
        self._variable_factories = NamedVariableFactories()
        self._named_inputs = NamedTensors()

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Module) and not name.startswith("_"):
            object.__setattr__(value, "_scope_name", name)
        object.__setattr__(self, name, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if "_variable_factories" not in self.__dict__:
            raise RuntimeError(f"{type(self).__name__}.__init__ must call super().__init__()")
        self._reset()
        _building.append(self)
        try:
            if self._scope_name is not None:
                with popxl.name_scope(self._scope_name):
                    result = self.build(*args, **kwargs)
            else:
                result = self.build(*args, **kwargs)
        finally:
            _building.pop()
        if _building:
            parent = _building[-1]
            if self._scope_name is not None:
                parent._variable_factories.insert(self._scope_name, self._variable_factories, overwrite=True)
                parent._named_inputs.insert(self._scope_name, self._named_inputs, overwrite=True)
            else:
                parent._variable_factories.update(self._variable_factories, overwrite=True)
                parent._named_inputs.update(self._named_inputs, overwrite=True)
        return result

    def add_variable_input(
        self,
        name: str,
        data_iter: Callable[[], Any] | Iterable[Any],
        dtype: Any | None = None,
        by_ref: bool = False,
        replica_grouping: popxl.ReplicaGrouping | None = None,
        overwrite: bool = False,
    ) -> popxl.Tensor:
        """A new graph input named `name`, with a factory for its variable."""
        return self._add_input(name, VariableFactory(data_iter, dtype, name, by_ref, replica_grouping), overwrite)

    def add_replica_sharded_variable_input(
        self,
        name: str,
        data_iter: Callable[[], Any] | Iterable[Any],
        dtype: Any | None = None,
        by_ref: bool = False,
        replica_grouping: popxl.ReplicaGrouping | None = None,
        shard_over: int | None = None,
    ) -> popxl.Tensor:
        """A new graph input holding this replica's shard of a variable of the data's shape."""
        grouping = replica_grouping if replica_grouping is not None else popxl.gir().replica_grouping()
        shards = grouping.group_size if shard_over is None else shard_over
        factory = VariableFactory(data_iter, dtype, name, by_ref, grouping, shards)
        return self._add_input(name, factory, False)

    def _add_input(self, name: str, factory: VariableFactory, overwrite: bool) -> popxl.Tensor:
        t = factory.create_input()
        self._variable_factories.insert(name, factory, overwrite)
        self._named_inputs.insert(name, t, overwrite)
        return t

    def create_graph(self, *args: Any, **kwargs: Any) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
        """Trace `build` into a new subgraph; returns its variable factories and the graph."""
        ir = popxl.gir()
        self._reset()
        _building.append(self)
        try:
            graph = ir.create_graph(self, *args, **kwargs)
        finally:
            _building.pop()
        factories, named = self._variable_factories, self._named_inputs
        self._reset()
        return factories, GraphWithNamedArgs(graph, named)
