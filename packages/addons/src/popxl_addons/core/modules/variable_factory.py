"""Variable factories: how to create a module's variables, and their graph inputs."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

import popxl
from popxl import ops
from popxl_addons.core.modules.dot_tree import DotTree
from popxl_addons.core.modules.named_replica_grouping import NamedReplicaGrouping
from popxl_addons.core.modules.named_tensors import NamedTensors

__all__ = [
    "VariableFactory",
    "NamedVariableFactories",
    "add_variable_input",
    "add_replica_sharded_variable_input",
    "host_scalar_tensor_types",
]

# The host values a factory takes (popxl-addons' `host_scalar_tensor_types`: Python and NumPy scalars and
# NumPy arrays; popxl-addons adds torch tensors, which this project's factories do not take).
host_scalar_tensor_types: tuple[type, ...] = (float, int, bool, np.number, np.bool_, np.ndarray)


@runtime_checkable
class SizedSource(Protocol):
    """A callable data source that states the shape and dtype of what it returns (such as
    `popxl_addons.layers.init.TruncatedNormal`): a factory then calls it only to make a variable."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]

    def __call__(self) -> Any: ...


class Filled:
    """A `SizedSource` of arrays filled with `value` (zeros by default), such as optimizer state starts from.

    Its arrays are read-only: a variable holds them without a copy (popxl copies what could still be
    written), and zeros are not even in memory until something reads them.
    """

    def __init__(self, shape: tuple[int, ...], dtype: Any, value: float = 0.0) -> None:
        self.shape: tuple[int, ...] = tuple(shape)
        self.dtype: np.dtype[Any] = np.dtype(dtype)
        self.value = value

    def __call__(self) -> np.ndarray[Any, Any]:
        """A new array, read-only."""
        data = np.zeros(self.shape, self.dtype) if self.value == 0 else np.full(self.shape, self.value, self.dtype)
        return _read_only(data)

    def __repr__(self) -> str:
        return f"Filled({self.shape}, {self.dtype}, value={self.value})"


def _read_only(data: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """`data`, new here, made read-only, so that the variable made from it holds it without a copy."""
    data.flags.writeable = False
    return data


def _calls(fn: Callable[[], Any]) -> Iterator[Any]:
    while True:
        yield fn()


class VariableFactory:
    """Creates one variable (or graph input) per use from a data source.

    `data_iter` is a callable, called once per new variable, or an iterable
    consumed one item per variable. The shape and dtype come from the first
    item, drawn here and kept for the first variable, or, for a `SizedSource`,
    from its `shape` and `dtype` without a draw (it is first called for the
    first variable). Unlike popxl-addons, a callable is not called an extra
    time as a check, so seeded random data differs from popxl-addons'.
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
        self._peeked: list[Any] = []
        found: Any  # what the dtype follows when `dtype` is not given: a NumPy dtype or the first item
        if isinstance(data_iter, SizedSource):
            self._draws = _calls(data_iter)
            shape, found = tuple(data_iter.shape), np.dtype(data_iter.dtype)
        else:
            if callable(data_iter):
                self._draws = _calls(data_iter)
                # This call checks the callable, as popxl-addons' trial call does, and makes the first variable.
                try:
                    first = next(self._draws)
                except Exception as e:
                    raise ValueError(f"Passed callable via `data_iter` throws error: {e!r}") from e
            elif isinstance(data_iter, Iterable):
                self._draws = iter(data_iter)
                first = next(self._draws)
            else:
                raise ValueError(f"`data_iter` must be a callable or an iterable, got {data_iter!r}")
            if not isinstance(first, host_scalar_tensor_types):
                raise ValueError(f"`data_iter` must give NumPy arrays or scalars, got {type(first).__name__}")
            self._peeked.append(first)
            data = np.asarray(first)
            shape, found = data.shape, data
        self.dtype = popxl.dtypes.as_dtype(dtype if dtype is not None else found)
        self.name = name
        self.by_ref = by_ref
        self.replica_grouping = replica_grouping if replica_grouping is not None else popxl.gir().replica_grouping()
        if shard_over > self.replica_grouping.group_size:
            raise AssertionError(f"shard_over={shard_over} exceeds the group size {self.replica_grouping.group_size}")
        self.shard_over = shard_over
        if shard_over > 1:
            self.meta_shape: tuple[int, ...] = shape
            self.shape: tuple[int, ...] = (math.prod(shape) // shard_over,)
        else:
            self.meta_shape, self.shape = (), shape

    @property
    def replica_sharded(self) -> bool:
        """Whether each replica holds a shard of the variable."""
        return self.shard_over > 1

    def _next(self, empty: bool) -> np.ndarray[Any, Any]:
        target = self.dtype.as_numpy()
        if empty:
            return _read_only(np.zeros(self.meta_shape or self.shape, target))
        data = np.asarray(self._peeked.pop() if self._peeked else next(self._draws))
        # Cast only when the source made another dtype: a copy of the full size otherwise.
        return data if data.dtype == target else _read_only(data.astype(target))

    def next_data(self, empty: bool = False) -> np.ndarray[Any, Any]:
        """The data of the next variable: one draw per replica group, stacked when there are several groups.

        `empty` gives zeros of the right shape without drawing.
        """
        groups = self.replica_grouping.num_groups
        if groups == 1:
            return self._next(empty)
        shape = self.meta_shape or self.shape
        if empty:
            return _read_only(np.zeros((groups, *shape), self.dtype.as_numpy()))
        # Filled group by group, so that at most one group's draw exists beside the result.
        out = np.empty((groups, *shape), self.dtype.as_numpy())
        for g in range(groups):
            data = self._next(False)
            if data.shape != shape:
                raise ValueError(f"Variable {self.name!r}: `data_iter` gave shape {data.shape}, not {shape}")
            out[g] = data
        return _read_only(out)

    def create_input(self, prefix: str | None = None) -> popxl.Tensor:
        """A graph input of the current graph for this variable."""
        name = f"{prefix}.{self.name}" if prefix and self.name else (self.name or prefix)
        return popxl.graph_input(self.shape, self.dtype, name, self.by_ref, self.meta_shape)

    def next_memmap(
        self, memmap_dir: str | os.PathLike[str], name: str, empty: bool = False, read_only_if_exists: bool = False
    ) -> np.memmap:
        """The next variable's data in file `<memmap_dir>/<name>.npy`: created from the next draw (left zero
        with `empty`) if it does not exist, else reused as it is, read-only with `read_only_if_exists`."""
        folder = Path(memmap_dir)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.npy"
        shape = self.meta_shape or self.shape
        if self.replica_grouping.num_groups != 1:
            shape = (self.replica_grouping.num_groups, *shape)
        if not path.exists():
            data = np.memmap(str(path), dtype=self.dtype.as_numpy(), shape=shape, mode="w+")
            if not empty:
                np.copyto(data, self.next_data())
            return data
        # popxl-addons' files are raw bytes: their size is what tells a file of another shape or dtype, which
        # np.memmap would silently extend with zeros (or read short).
        expected = math.prod(shape) * np.dtype(self.dtype.as_numpy()).itemsize
        found = path.stat().st_size
        if found != expected:
            raise ValueError(
                f"{path} holds {found} bytes, and variable {name!r} ({self.dtype.name} {tuple(shape)}) needs "
                f"{expected}: it was written for another shape or dtype. It is left as it is; remove it, or "
                "give another memmap_dir."
            )
        if read_only_if_exists:
            return np.memmap(str(path), dtype=self.dtype.as_numpy(), shape=shape, mode="r")
        return np.memmap(str(path), dtype=self.dtype.as_numpy(), shape=shape, mode="r+")

    def _host_data(
        self, name: str | None, empty: bool, memmap_dir: str | os.PathLike[str] | None, read_only_if_exists: bool
    ) -> np.ndarray[Any, Any]:
        if memmap_dir:
            return self.next_memmap(memmap_dir, name or self.name or "t", empty, read_only_if_exists)
        return self.next_data(empty)

    def create_tensor(
        self,
        name: str | None = None,
        empty: bool = False,
        memmap_dir: str | os.PathLike[str] | None = None,
        read_only_if_exists: bool = False,
    ) -> popxl.Variable:
        """A new main-graph variable (data stacked per group when grouped), its data in a file of
        `memmap_dir` if given (see `next_memmap`)."""
        data = self._host_data(name, empty, memmap_dir, read_only_if_exists)
        return popxl.variable(data, self.dtype, name or self.name, replica_grouping=self.replica_grouping)

    def create_remote_tensor(
        self,
        buffer: popxl.RemoteBuffer,
        entry: int,
        name: str | None = None,
        empty: bool = False,
        memmap_dir: str | os.PathLike[str] | None = None,
        read_only_if_exists: bool = False,
    ) -> popxl.RemoteVariable:
        """A new variable kept in entry `entry` of `buffer` (replica-sharded when the buffer holds shards), its
        data in a file of `memmap_dir` if given."""
        data = self._host_data(name, empty, memmap_dir, read_only_if_exists)
        create = popxl.remote_replica_sharded_variable if buffer.meta_shape else popxl.remote_variable
        return create(data, buffer, entry, self.dtype, name or self.name, replica_grouping=self.replica_grouping)


class NamedVariableFactories(DotTree[VariableFactory]):
    """Variable factories under dotted names."""

    def init(
        self,
        prefix: str | None = None,
        empty: bool = False,
        memmap_dir: str | os.PathLike[str] | None = None,
        read_only_if_exists: bool = False,
    ) -> NamedTensors:
        """Create every variable (in key order, so that seeded random data is reproducible), named by its key;
        with `memmap_dir`, each keeps its data in a file there named after it."""
        tensors = {}
        for key, factory in sorted(self.to_dict().items()):
            name = f"{prefix}.{key}" if prefix else key
            tensors[key] = factory.create_tensor(name, empty, memmap_dir, read_only_if_exists)
        return NamedTensors.from_dict(tensors)

    def init_remote(
        self,
        buffers: DotTree[popxl.RemoteBuffer],
        entry: int = 0,
        prefix: str | None = None,
        empty: bool = False,
        memmap_dir: str | os.PathLike[str] | None = None,
        read_only_if_exists: bool = False,
    ) -> NamedTensors:
        """Create every variable (in key order) as a remote variable in entry `entry` of the buffer of its name."""
        held = buffers.to_dict()
        missing = [k for k in self.keys_flat() if k not in held]
        if missing:
            raise KeyError(f"init_remote: no buffers for {missing}; buffers: {list(held)}")
        tensors = {}
        for key, factory in sorted(self.to_dict().items()):
            name = f"{prefix}.{key}" if prefix else key
            tensors[key] = factory.create_remote_tensor(held[key], entry, name, empty, memmap_dir, read_only_if_exists)
        return NamedTensors.from_dict(tensors)

    @property
    def replica_groupings(self) -> NamedReplicaGrouping:
        """Each variable's replica grouping, under its name."""
        return NamedReplicaGrouping.from_dict({k: f.replica_grouping for k, f in self.to_dict().items()})

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


def add_replica_sharded_variable_input(
    name: str,
    data_iter: Callable[[], Any] | Iterable[Any],
    dtype: Any | None = None,
    by_ref: bool = False,
    replica_grouping: popxl.ReplicaGrouping | None = None,
    shard_over: int | None = None,
) -> tuple[popxl.Tensor, VariableFactory]:
    """A graph input holding a shard of a variable (over `shard_over` members of the grouping, all by default),
    and the factory for the variable."""
    group = replica_grouping if replica_grouping is not None else popxl.gir().replica_grouping()
    factory = VariableFactory(data_iter, dtype, name, by_ref, group, shard_over or group.group_size)
    return factory.create_input(), factory


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
