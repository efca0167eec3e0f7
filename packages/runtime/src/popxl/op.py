"""Ops and the op registry: the one contract each op kind gives the rest of the system.

An `OpDef` declares, once, everything the runtime, autodiff and tools know of an
op kind: its attrs' normal form and its output specs (from specs and attrs
alone, never by computing on arrays), its lowering, its gradient, the
resources it reads and writes, the subgraphs it runs, the replica groupings it
communicates over, and which inputs it updates in place. Everything else asks
these declarations; nothing compares op names. Packages outside the runtime
define new op kinds the same way through `popxl.extension`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from popxl import context
from popxl.remote_buffer import RemoteBuffer
from popxl.replica_grouping import ReplicaGrouping
from popxl.streams import DeviceToHostStream, HostToDeviceStream
from popxl.tensor import Tensor, TensorSpec

if TYPE_CHECKING:
    from popxl.grad_builder import GradBuilder
    from popxl.graph import Graph


class CheckResult:
    """The resource written by ops that check an index at run time: the first failed check."""

    def __repr__(self) -> str:
        return "CHECK_RESULT"


CHECK_RESULT = CheckResult()

Resource = RemoteBuffer | HostToDeviceStream | DeviceToHostStream | CheckResult
Attrs = Mapping[str, Any]
NormaliseFn = Callable[[Sequence[TensorSpec], Attrs], dict[str, Any]]
InferFn = Callable[[Sequence[TensorSpec], Attrs], Sequence[TensorSpec]]
LowerFn = Callable[..., Sequence[Any]]
GradFn = Callable[["GradBuilder", "Op", Sequence["Tensor | None"]], Sequence["Tensor | None"]]
EffectFn = Callable[[Attrs], frozenset[Resource]]
ViewUpdateFn = Callable[[Attrs, Sequence[Any], Any], Sequence[Any]]
FlopsFn = Callable[[Sequence[TensorSpec], Sequence[TensorSpec], Attrs], int]


class Subgraph(NamedTuple):
    """A graph an op runs: how many times one execution of the op runs it, and how the op's inputs and
    outputs follow the graph's.

    `inputs_follow`: the op's inputs are the graph's inputs, in order, so an input added to the graph later
    can be fed at the op too (calls and loops). `outputs_follow`: the op's outputs are the graph's, so an
    output added to the graph later becomes an output of the op too (a call; not a loop, whose outputs are
    carried into its inputs).
    """

    graph: Graph
    trips: int
    inputs_follow: bool = False
    outputs_follow: bool = False


def no_resources(attrs: Attrs) -> frozenset[Resource]:
    """The effect of an op that reads or writes no resource."""
    return frozenset()


def _none(attrs: Attrs) -> tuple[()]:
    return ()


def _no_modifications(attrs: Attrs) -> Mapping[int, int | None]:
    return {}


@dataclass(frozen=True)
class Effects:
    """What one execution of an op kind touches beyond its inputs and outputs.

    - `reads(attrs)` / `writes(attrs)`: the resources (remote buffers, host
      streams, the run-time check result) an execution may read / replace.
    - `subgraphs(attrs)`: the graphs the op runs, how often, and whether the
      op's inputs and outputs follow each graph's (`Subgraph`).
    - `groupings(attrs)`: the replica groupings the op communicates over.
    """

    reads: EffectFn = no_resources
    writes: EffectFn = no_resources
    subgraphs: Callable[[Attrs], Sequence[Subgraph]] = _none
    groupings: Callable[[Attrs], Sequence[ReplicaGrouping]] = _none


@dataclass(frozen=True)
class Aliasing:
    """Which inputs an op kind updates in place, and whether its output is a view of them.

    - `modifies(attrs)`: input index -> index of the output holding its updated
      value (the output aliases the input), or None when no output does.
    - `view_update(attrs, inputs, view)`: declared by in-place view ops
      (`reshape_`, `slice_`, ...), whose output is a view of their inputs and
      shares their storage, so that an in-place update of either is seen
      through both; it returns the inputs' values with the viewed elements
      replaced by `view`.
    - `note`: for kinds whose updated inputs depend on their attrs, which ones,
      in words.
    """

    modifies: Callable[[Attrs], Mapping[int, int | None]] = _no_modifications
    view_update: ViewUpdateFn | None = None
    note: str = ""


@dataclass(frozen=True)
class PopartFacts:
    """What popxl-addons' reports and transforms know of an op kind as popart's op.

    - `op_type`: popart's op type of the kind (`MatMul`, `Add`, `Call`, ...),
      which keys popxl-addons' reports; empty where no report asks for it.
    - `flops(in_specs, out_specs, attrs)`: the floating-point operations one
      execution performs, from shapes alone, for the kinds popxl-addons' FLOP
      estimate counts (None: it counts nothing for the kind).
    - `ipu_settings`: the IPU-only settings (`popxl.ipu_only`) that popart lets
      transforms set on an existing op of the kind: `available_memory_proportion`
      (`available_memory_proportions` for convolutions, one per convolution) and
      matmuls' `fully_connected_pass`.
    - `identity_when(op)`: popart's OpToIdentityPattern: whether the op, of a
      kind that may become an identity of its first input, does so when
      popxl-addons' pre-alias patterns run (None: the kind never does).
    """

    op_type: str = ""
    flops: FlopsFn | None = None
    ipu_settings: frozenset[str] = frozenset()
    identity_when: Callable[[Op], bool] | None = None


@dataclass(eq=False)
class OpDef:
    """Definition of one op kind.

    - `normalise(specs, attrs)` returns the attrs in normal form (axes made
      non-negative, defaults filled in) or raises for bad attrs; `infer(specs,
      attrs)` returns the output specs for normalised attrs. Both are pure.
    - `lower(ctx, attrs, *values)` returns the output values, followed by the
      new value of each modified input that no output carries, in input order.
    - `grad(builder, op, output_grads)` creates gradient ops in the current
      graph and returns one gradient (or None) per input.
    - `check(op)` may refuse an op when a session is created.
    - `effects`: the resources it reads and writes, the subgraphs it runs and
      the replica groupings it communicates over (`Effects`).
    - `aliasing`: the inputs it updates in place, and how a view writes
      through to its inputs (`Aliasing`).
    - `popart`: its popart op type, FLOP count, settable IPU-only settings and
      identity rewrite, for popxl-addons (`PopartFacts`).
    - `departure`: where the op kind computes or differentiates differently
      from popxl, or has no popxl op, in words (empty: it does as popxl).
    - `origin`: the module that registered the kind, filled in by `register`
      (the runtime's own kinds are those from `popxl.*`).
    """

    name: str
    infer: InferFn
    lower: LowerFn
    grad: GradFn | None = None
    normalise: NormaliseFn | None = None
    output_names: tuple[str, ...] = ()
    check: Callable[[Op], None] | None = None
    effects: Effects = field(default_factory=Effects)
    aliasing: Aliasing = field(default_factory=Aliasing)
    popart: PopartFacts = field(default_factory=PopartFacts)
    departure: str = ""
    origin: str = ""

    def out_name(self, i: int) -> str:
        """Default name of output `i`."""
        if i < len(self.output_names):
            return self.output_names[i]
        return f"{self.name}_out" if i == 0 else f"{self.name}_out{i}"

    def define_grad(self, grad: GradFn) -> None:
        """Give an op kind defined without one its gradient rule (for rules built on transforms)."""
        if self.grad is not None:
            raise ValueError(f"Op kind {self.name!r} already has a gradient rule")
        self.grad = grad

    def signature(self, specs: Sequence[TensorSpec], attrs: Attrs) -> tuple[dict[str, Any], list[TensorSpec]]:
        """Normalised attrs and output specs for inputs of `specs`."""
        normal = self.normalise(specs, attrs) if self.normalise is not None else dict(attrs)
        return normal, list(self.infer(specs, normal))


REGISTRY: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    """Add an op kind to the registry, recording the module that registers it as its `origin`."""
    if opdef.name in REGISTRY and REGISTRY[opdef.name] is not opdef:
        raise ValueError(f"An op kind named {opdef.name!r} is already registered")
    if not opdef.origin:
        caller = inspect.currentframe()
        caller = caller.f_back if caller is not None else None
        # Op kinds made by a factory function are registered by the factory's module all the same.
        opdef.origin = str(caller.f_globals.get("__name__", "")) if caller is not None else ""
    REGISTRY[opdef.name] = opdef
    return opdef


@dataclass(eq=False)
class Op:
    """One op of a graph: an op kind applied to input tensors."""

    opdef: OpDef
    graph: Graph
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    attrs: dict[str, Any]
    placement: context.Placement
    # The op's position in its graph.
    index: int = 0
    # Unique in its Ir, numbered from 100 in creation order as popart numbers its ops.
    id: int = -1
    # Set by op-to-identity rewrites, so that tools can tell a rewritten op from a written identity.
    replaced_by_identity: bool = False

    @property
    def name(self) -> str:
        """The op kind."""
        return self.opdef.name

    @property
    def reads(self) -> frozenset[Resource]:
        """The resources one execution of the op may read."""
        return self.opdef.effects.reads(self.attrs)

    @property
    def writes(self) -> frozenset[Resource]:
        """The resources one execution of the op may replace."""
        return self.opdef.effects.writes(self.attrs)

    @property
    def subgraphs(self) -> tuple[Subgraph, ...]:
        """The graphs the op runs, with how often each runs."""
        return tuple(self.opdef.effects.subgraphs(self.attrs))

    @property
    def groupings(self) -> tuple[ReplicaGrouping, ...]:
        """The replica groupings the op communicates over."""
        return tuple(self.opdef.effects.groupings(self.attrs))

    @property
    def modifies(self) -> Mapping[int, int | None]:
        """Modified input index -> the output aliasing its new value (or None)."""
        return self.opdef.aliasing.modifies(self.attrs)

    @property
    def flops(self) -> int | None:
        """The floating-point operations of one execution, where the op kind counts them (`PopartFacts.flops`)."""
        flops = self.opdef.popart.flops
        if flops is None:
            return None
        return flops([t.spec for t in self.inputs], [t.spec for t in self.outputs], self.attrs)

    def __repr__(self) -> str:
        ins = ", ".join(t.id for t in self.inputs)
        outs = ", ".join(t.id for t in self.outputs)
        return f"Op[{self.opdef.name}({ins}) -> ({outs})]"


def graph_reads(graph: Graph) -> frozenset[Resource]:
    """The resources running `graph` may read: the union over its ops, subgraphs included."""
    return frozenset().union(*(op.reads for op in graph.ops))


def graph_writes(graph: Graph) -> frozenset[Resource]:
    """The resources running `graph` may replace: the union over its ops, subgraphs included."""
    return frozenset().union(*(op.writes for op in graph.ops))


def reachable_graphs(graph: Graph) -> list[Graph]:
    """`graph` and every graph it runs, directly or not, each once."""
    seen: dict[int, Graph] = {}
    todo = [graph]
    while todo:
        g = todo.pop()
        if id(g) in seen:
            continue
        seen[id(g)] = g
        todo.extend(sub.graph for op in g.ops for sub in op.subgraphs)
    return list(seen.values())


def check_inputs(graph: Graph, inputs: Sequence[Any], what: str) -> None:
    """Raise unless every input is a Tensor of `graph`."""
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise TypeError(f"Input {i} of {what} is {t!r}, not a popxl Tensor")
        if t.graph is not graph:
            raise ValueError(
                f"Input {i} of {what}, {t.id}, is not in the current Graph {graph.id!r}: "
                "pass tensors into subgraphs as graph inputs"
            )


def create_op(
    opdef: OpDef,
    inputs: Sequence[Tensor],
    attrs: Attrs | None = None,
    names: Sequence[str | None] | None = None,
    graph: Graph | None = None,
) -> list[Tensor]:
    """Add an op of kind `opdef` to the current graph and return its outputs."""
    return list(add_op(opdef, inputs, attrs, names, graph).outputs)


def add_op(
    opdef: OpDef,
    inputs: Sequence[Tensor],
    attrs: Attrs | None = None,
    names: Sequence[str | None] | None = None,
    graph: Graph | None = None,
) -> Op:
    """Add an op of kind `opdef` to `graph` (default: the current graph) and return it."""
    return (graph if graph is not None else context.gcg()).add_op(opdef, inputs, attrs, names)
