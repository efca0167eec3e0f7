"""The runtime's extension point: define new op kinds outside the runtime.

An extension defines an `OpDef` (its declarations are documented there:
shape rule, lowering, gradient, resources read and written, subgraphs and
replica groupings (`Effects`), in-place updates (`Aliasing`), popart's facts
for popxl-addons (`PopartFacts`), and optionally a `check` run when a
Session is created), registers it with `register`, and creates ops with
`create_op`; `replace_with_identity` rewrites an op into an identity.
Lowerings receive a `LoweringContext`; `all_reduce_values` and
`gather_values` give extensions the runtime's collectives without touching
JAX. `loaded_variable` gives a remote variable an on-device value loaded
with the weights, as popxl's `replica_sharded_variable` does.
"""

from popxl.creation import loaded_variable
from popxl.grad_builder import GradBuilder
from popxl.lowering.interpreter import LoweringContext
from popxl.op import REGISTRY, Aliasing, Attrs, Effects, Op, OpDef, PopartFacts, create_op, register
from popxl.opdefs.collectives import all_reduce_values, gather_values, group_of
from popxl.opdefs.elementwise import IDENTITY


def replace_with_identity(op: Op) -> None:
    """Rewrite `op` in place into an identity of its first input, keeping its output tensor."""
    if len(op.inputs) < 1 or len(op.outputs) != 1:
        raise ValueError(f"{op} cannot become an identity: it needs one output and at least one input")
    op.graph.rewrite_op(op, opdef=IDENTITY, inputs=op.inputs[:1], attrs={})
    op.replaced_by_identity = True


__all__ = [
    "REGISTRY",
    "Aliasing",
    "Attrs",
    "Effects",
    "GradBuilder",
    "LoweringContext",
    "Op",
    "OpDef",
    "PopartFacts",
    "all_reduce_values",
    "create_op",
    "loaded_variable",
    "gather_values",
    "group_of",
    "register",
    "replace_with_identity",
]
