"""Tensors: values of a graph, with popxl's ids, specs and operator overloads.

Everything that builds ops or tensors sits above this module, so what popxl offers here that does is
declared here for type checkers and set on it from above: the operators and op-building methods of
Tensor by `popxl.ops` (see `popxl.ops._tensor_methods`), and popxl's tensor-creating functions
(`popxl.tensor.variable`, ...) by `popxl`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import numpy as np

from popxl import dtypes

if TYPE_CHECKING:
    # popxl defines its tensor-creating functions in `popxl.tensor`; here they live above it.
    from popxl.creation import constant as constant
    from popxl.creation import remote_replica_sharded_variable as remote_replica_sharded_variable
    from popxl.creation import remote_variable as remote_variable
    from popxl.creation import replica_sharded_variable as replica_sharded_variable
    from popxl.creation import variable as variable
    from popxl.graph import Graph
    from popxl.graph import graph_input as graph_input
    from popxl.graph import graph_output as graph_output
    from popxl.ir import Ir
    from popxl.op import Op
    from popxl.remote_buffer import RemoteBuffer
    from popxl.remote_buffer import replica_sharded_buffer as replica_sharded_buffer
    from popxl.replica_grouping import ReplicaGrouping

# popxl's alias for host data given for a tensor: a NumPy array or any iterable of Python scalars (PyTorch
# tensors, nested lists, ...).
HostTensor: TypeAlias = np.ndarray[Any, Any] | Iterable[int | float | bool]


class TensorSpec(Mapping[str, Any]):
    """Shape, dtype and meta_shape of a tensor, as a read-only mapping."""

    def __init__(self, shape: tuple[int, ...], dtype: dtypes.dtype, meta_shape: tuple[int, ...] = ()) -> None:
        self._shape = tuple(int(s) for s in shape)
        self._dtype = dtypes.as_dtype(dtype)
        if not self._dtype.on_device:
            raise TypeError(
                f"Tensors of {self._dtype} are not supported here: XLA runs without 64-bit and complex types; "
                "use a 32-bit or narrower type"
            )
        self._meta_shape = tuple(int(s) for s in meta_shape)

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the tensor."""
        return self._shape

    @property
    def dtype(self) -> dtypes.dtype:
        """Element type of the tensor."""
        return self._dtype

    @property
    def meta_shape(self) -> tuple[int, ...]:
        """Full shape of a replica-sharded tensor, `()` otherwise."""
        return self._meta_shape

    def __getitem__(self, key: str) -> Any:
        if key not in ("shape", "dtype", "meta_shape"):
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(("shape", "dtype", "meta_shape"))

    def __len__(self) -> int:
        return 3

    def __hash__(self) -> int:
        return hash((self._shape, self._dtype.name, self._meta_shape))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorSpec):
            return NotImplemented
        return (self._shape, self._dtype, self._meta_shape) == (other._shape, other._dtype, other._meta_shape)

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self._shape}, dtype={self._dtype}, meta_shape={self._meta_shape})"


class SpecView:
    """Shape and dtype read from a `_spec` (shared by tensors and host streams)."""

    _spec: TensorSpec

    @property
    def spec(self) -> TensorSpec:
        """Shape, dtype and meta_shape."""
        return self._spec

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of one value."""
        return self._spec.shape

    @property
    def dtype(self) -> dtypes.dtype:
        """Element type."""
        return self._spec.dtype


class Tensor(SpecView):
    """A value in one graph: a graph input, an op output, a constant or a variable."""

    def __init__(self, graph: Graph, name: str, spec: TensorSpec) -> None:
        self._graph = graph
        self._spec = spec
        self._id = graph.take_id(name)
        self.producer: Op | None = None
        graph.add_tensor(self)

    @property
    def id(self) -> str:
        """The full id: graph prefix, name scopes and name."""
        return self._id

    @property
    def name(self) -> str:
        """The id without the graph prefix."""
        graph_id = self._graph.id
        return self._id[len(graph_id) + 1 :] if graph_id else self._id

    @property
    def graph(self) -> Graph:
        """The graph that owns this tensor."""
        return self._graph

    @property
    def ir(self) -> Ir:
        """The Ir that owns this tensor."""
        return self._graph.ir

    @property
    def meta_shape(self) -> tuple[int, ...]:
        """Full shape of a replica-sharded tensor, `()` otherwise."""
        return self._spec.meta_shape

    @property
    def rank(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def nelms(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    def __repr__(self) -> str:
        return f"Tensor[{self.id} {self.dtype.name} {self.shape}]"

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __len__(self) -> int:
        if not self.shape:
            raise ValueError("Tensor is a scalar and doesn't have a length.")
        return self.shape[0]

    if TYPE_CHECKING:
        # Operators and op-building methods: `popxl.ops` sets them (popxl/ops/_tensor_methods.py), as it
        # sits above this module. Non-tensor operands take this tensor's dtype.
        def __add__(self, other: Any) -> Tensor: ...
        def __radd__(self, other: Any) -> Tensor: ...
        def __iadd__(self, other: Any) -> Tensor: ...
        def __sub__(self, other: Any) -> Tensor: ...
        def __rsub__(self, other: Any) -> Tensor: ...
        def __mul__(self, other: Any) -> Tensor: ...
        def __rmul__(self, other: Any) -> Tensor: ...
        def __truediv__(self, other: Any) -> Tensor: ...
        def __rtruediv__(self, other: Any) -> Tensor: ...
        def __mod__(self, other: Any) -> Tensor: ...
        def __rmod__(self, other: Any) -> Tensor: ...
        def __pow__(self, other: Any) -> Tensor: ...
        def __rpow__(self, other: Any) -> Tensor: ...
        def __and__(self, other: Any) -> Tensor: ...
        def __rand__(self, other: Any) -> Tensor: ...
        def __or__(self, other: Any) -> Tensor: ...
        def __ror__(self, other: Any) -> Tensor: ...
        def __matmul__(self, other: Any) -> Tensor: ...
        def __rmatmul__(self, other: Any) -> Tensor: ...
        def __invert__(self) -> Tensor: ...
        def __neg__(self) -> Tensor: ...
        def __getitem__(self, key: Any) -> Tensor: ...

        def reshape(self, shape: tuple[int, ...]) -> Tensor:
            """This tensor reshaped."""

        def reshape_(self, shape: tuple[int, ...]) -> Tensor:
            """A view of this tensor with another shape."""

        def transpose(self, permutation: tuple[int, ...] | None = None) -> Tensor:
            """This tensor with its axes permuted (reversed by default)."""

        def transpose_(self, permutation: tuple[int, ...] | None = None) -> Tensor:
            """A view of this tensor with its axes permuted (reversed by default)."""

        def flatten(self) -> Tensor:
            """This tensor as one axis."""

        def flatten_(self) -> Tensor:
            """A view of this tensor as one axis."""

        def detach(self) -> Tensor:
            """This tensor, with no gradient flowing back through it."""

        def detach_(self) -> Tensor:
            """This tensor detached in place."""

        def copy_to_ipu(self, destination: int, source: int | None = None) -> Tensor:
            """This tensor copied to IPU `destination` (recorded only: there is one device per replica here)."""

    @property
    def T(self) -> Tensor:
        """This tensor with its axes reversed."""
        return self.transpose()

    @property
    def T_(self) -> Tensor:
        """This tensor with its axes reversed, as a view (in place)."""
        return self.transpose_()

    def diag(self) -> Tensor:
        """The diagonal of this 2-D tensor."""
        if self.rank != 2:
            raise ValueError("Diag expected a 2d tensor.")
        return self.flatten()[:: self.shape[1] + 1]

    def strides(self, shape: tuple[int, ...] | None = None) -> tuple[int, ...]:
        """Bytes to step along each axis of this tensor (or of `shape`) in row-major order, as NumPy counts them."""
        dims = tuple(self.shape if shape is None else shape)
        steps = [self.dtype.itemsize]
        for d in reversed(dims[1:]):
            steps.append(steps[-1] * d)
        return tuple(reversed(steps)) if dims else ()

    @property
    def scope(self) -> str:
        """The graph scope part of the id ('' in the main graph), as popxl's `Tensor.scope`."""
        return self._graph.id


class Constant(Tensor):
    """An immutable tensor whose value is fixed at build time."""

    def __init__(self, graph: Graph, name: str, data: np.ndarray[Any, Any], dtype: dtypes.dtype) -> None:
        super().__init__(graph, name, TensorSpec(data.shape, dtype))
        self.data = data


class HostValueHolder(Protocol):
    """What holds a Variable's host value while a Session's devices hold the value alone: the Session's
    `popxl.lowering.host_values.HostValues`."""

    def read(self, variable: Variable) -> np.ndarray[Any, Any]:
        """The current value of `variable`, which the devices hold."""
        ...


class Variable(Tensor):
    """Persistent device state of the main graph, initialised from host data."""

    def __init__(
        self,
        graph: Graph,
        name: str,
        data: np.ndarray[Any, Any],
        dtype: dtypes.dtype,
        replica_grouping: ReplicaGrouping,
        retrieval_mode: str,
        meta_shape: tuple[int, ...] = (),
    ) -> None:
        self._group_shape = tuple(data.shape[1:] if replica_grouping.num_groups > 1 else data.shape)
        super().__init__(graph, name, TensorSpec(self._group_shape, dtype, meta_shape))
        self._host_data: np.ndarray[Any, Any] | None = data
        # What holds the value while a Session's devices hold it alone (see `Session`): weakly, as the Session does.
        self._holder: weakref.ref[HostValueHolder] | None = None
        self.replica_grouping = replica_grouping
        self.retrieval_mode = retrieval_mode

    @property
    def host_data(self) -> np.ndarray[Any, Any]:
        """The host value: the data given at creation (or last read back), or, while a Session holds the
        variable on its devices alone, that Session's current value."""
        if self._holder is None:
            assert self._host_data is not None
            return self._host_data
        holder = self._holder()
        if holder is None:
            raise RuntimeError(f"Variable {self.id}: the Session that held its value ended while attached")
        return holder.read(self)

    def hand_over(self, holder: HostValueHolder) -> None:
        """Let `holder` hold the value while a Session's devices hold it alone: the host data is dropped until
        `take_back`."""
        self._holder = weakref.ref(holder)
        self._host_data = None

    def held_by(self, holder: HostValueHolder) -> bool:
        """Whether `holder` holds the value (`hand_over`)."""
        return self._holder is not None and self._holder() is holder

    def take_back(self, data: np.ndarray[Any, Any]) -> None:
        """The host value again, from what held it."""
        self._holder = None
        self._host_data = data

    @property
    def group_shape(self) -> tuple[int, ...]:
        """The shape of one group's value (the host data less its group axis)."""
        return self._group_shape

    @property
    def _memmap_arr(self) -> np.memmap | None:
        # popxl's own name for the map, which popxl-addons reads.
        return self._host_data if isinstance(self._host_data, np.memmap) else None

    @property
    def is_memmap(self) -> bool:
        """Whether the host value lives in an `np.memmap` given at creation, which the Session writes back to."""
        return isinstance(self._host_data, np.memmap)

    @property
    def shape_on_host(self) -> tuple[int, ...]:
        """Shape of the host data: a leading group axis when there is more than one group."""
        if self.replica_grouping.num_groups > 1:
            return (self.replica_grouping.num_groups, *self._group_shape)
        return self._group_shape


class RemoteVariable(Variable):
    """A variable kept in entry `offset` of a remote buffer, used through `ops.remote_load`.

    When `sharded`, each replica's entry holds its shard of the flattened,
    padded value: the value of each group is sharded over `shard_over` members
    at a time, and a replica's shard is its rank in the group modulo
    `shard_over`. The tensor's shape is the shard's, with the full shape as its
    meta_shape.
    """

    def __init__(
        self,
        graph: Graph,
        name: str,
        data: np.ndarray[Any, Any],
        dtype: dtypes.dtype,
        replica_grouping: ReplicaGrouping,
        retrieval_mode: str,
        buffer: RemoteBuffer,
        offset: int,
        shard_over: int | None,
    ) -> None:
        super().__init__(graph, name, data, dtype, replica_grouping, retrieval_mode)
        if shard_over is not None:
            self._spec = TensorSpec(buffer.tensor_shape, dtype, self._group_shape)
        self.buffer = buffer
        self.offset = offset
        self.shard_over = shard_over if shard_over is not None else 1

    @property
    def sharded(self) -> bool:
        """Whether each replica's entry holds a shard of the value rather than all of it."""
        return self._spec.meta_shape != ()

    def shard_domain(self, replica: int) -> list[int]:
        """The replicas whose shards together make up `replica`'s value, in shard order."""
        g = self.replica_grouping
        members = g.members(g.group_of(replica))
        start = g.rank_of(replica) // self.shard_over * self.shard_over
        return members[start : start + self.shard_over]


class LoadedVariable(Variable):
    """The on-device value of a remote variable: its shard per replica if it is replica-sharded.

    It is persistent device state, loaded from `whole` when weights go to the
    device, as popxl's `replica_sharded_variable` and popxl-addons'
    `seed_variable` load theirs; its host value is `whole`'s, so read and write
    `whole` in a Session.
    """

    def __init__(self, graph: Graph, name: str, whole: RemoteVariable) -> None:
        g = whole.replica_grouping
        host_shape = (g.num_groups, *whole.shape) if g.num_groups > 1 else whole.shape
        # Never read: the shard's values come from `whole`.
        data = np.zeros(host_shape, whole.dtype.as_numpy())
        super().__init__(graph, name, data, whole.dtype, g, whole.retrieval_mode, whole.meta_shape)
        self.whole = whole


class TensorByRef(Tensor):
    """Annotation for a `create_graph` argument that the graph may modify in place."""
