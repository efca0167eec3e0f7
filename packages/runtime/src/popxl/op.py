"""Ops and the op registry: the one place where each op kind is defined.

An `OpDef` gives an op kind's shape inference, lowering, gradient rule and side
effects. Packages outside the runtime define new ops the same way and add them
with `create_op`; this is the runtime's extension point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from popxl import context
from popxl.tensor import Tensor, TensorSpec

if TYPE_CHECKING:
    from popxl.graph import Graph
    from popxl.transforms.grad_builder import GradBuilder

Attrs = dict[str, Any]
InferFn = Callable[[Sequence[TensorSpec], Attrs], Sequence[TensorSpec]]
LowerFn = Callable[..., Any]
GradFn = Callable[["GradBuilder", "Op", Sequence["Tensor | None"]], Sequence["Tensor | None"]]


@dataclass(frozen=True)
class OpDef:
    """Definition of one op kind.

    `lower(ctx, op, *values)` returns the output values (a list), and, for ops
    that modify inputs in place, the new values of the modified inputs as
    `(outputs, {input_index: value})`. `grad(builder, op, output_grads)`
    creates gradient ops in the current graph and returns one gradient (or
    None) per input. `check(op)` may refuse an op when a session is created.
    """

    name: str
    infer: InferFn
    lower: LowerFn
    grad: GradFn | None = None
    output_names: tuple[str, ...] = ()
    side_effects: bool = False
    check: Callable[[Op], None] | None = None
    identity_replaceable: Callable[[Op], bool] | None = None

    def out_name(self, i: int) -> str:
        """Default name of output `i`."""
        if i < len(self.output_names):
            return self.output_names[i]
        return f"{self.name}_out" if i == 0 else f"{self.name}_out{i}"


REGISTRY: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    """Add an op kind to the registry."""
    if opdef.name in REGISTRY and REGISTRY[opdef.name] is not opdef:
        raise ValueError(f"An op kind named {opdef.name!r} is already registered")
    REGISTRY[opdef.name] = opdef
    return opdef


@dataclass(eq=False)
class Op:
    """One op of a graph: an op kind applied to input tensors."""

    opdef: OpDef
    graph: Graph
    inputs: list[Tensor]
    outputs: list[Tensor]
    attrs: Attrs
    modified: tuple[int, ...]
    placement: context.Placement
    index: int = 0
    # Set by op-to-identity rewrites, so that tools can tell a rewritten op from a written identity.
    replaced_by_identity: bool = False

    @property
    def name(self) -> str:
        """The op kind."""
        return self.opdef.name

    def __repr__(self) -> str:
        ins = ", ".join(t.id for t in self.inputs)
        outs = ", ".join(t.id for t in self.outputs)
        return f"Op[{self.opdef.name}({ins}) -> ({outs})]"


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
    modified: Sequence[int] = (),
    graph: Graph | None = None,
) -> list[Tensor]:
    """Add an op of kind `opdef` to the current graph and return its outputs."""
    graph = graph if graph is not None else context.gcg()
    check_inputs(graph, inputs, f"op '{opdef.name}'")
    attrs = dict(attrs or {})
    specs = opdef.infer([t.spec for t in inputs], attrs)
    scope = context.name_scope_prefix()
    outputs = []
    for i, spec in enumerate(specs):
        given = names[i] if names is not None and i < len(names) else None
        outputs.append(Tensor(graph, scope + (given or opdef.out_name(i)), spec))
    op = Op(opdef, graph, list(inputs), outputs, attrs, tuple(modified), context.current_placement(graph))
    graph._add_op(op)
    return outputs
