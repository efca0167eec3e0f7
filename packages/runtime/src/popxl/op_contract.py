"""The op-contract kit: holding an op kind to its registry declaration, for the registry sweep tests of popxl and
its extensions.

`check_op(opdef, example)` checks one application of an op kind:

- its shape rule leaves its attrs alone and agrees with `jax.eval_shape` of
  its lowering;
- its lowering writes exactly the resources it declares, reads no others, and
  returns one value per output and per modified input no output carries;
- its outputs, and the gradients its gradient rule builds through popxl's
  autodiff, agree with `jax.vjp` of the same maths written directly (the
  example's `reference`);
- its FLOP count, where it declares one, names popart's op type and is near
  XLA's own count of its lowering;
- the IPU-only settings it declares settable are ones `popxl.ipu_only` records
  on its ops and reads back;
- an op it declares identity-replaceable can become an identity of its first
  input, keeping its output.

`float16_errors(opdef, factory)` runs the same example in float16 and in float32 (on the same
float16-rounded inputs, at several input scales) and says how far apart the results are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from popxl import dtypes, ipu_only
from popxl.extension import replace_with_identity
from popxl.grad_info import GradGraphInfo
from popxl.graph import Graph, graph_input, graph_output
from popxl.ir import Ir
from popxl.lowering.interpreter import CheckSites, LoweringContext
from popxl.lowering.replicas import ReplicaMesh
from popxl.lowering.world import CheckState, HostOutput, World
from popxl.op import CHECK_RESULT, REGISTRY, Op, OpDef, Resource, add_op, graph_reads, graph_writes
from popxl.remote_buffer import RemoteBuffer
from popxl.streams import DeviceToHostStream, HostToDeviceStream
from popxl.tensor import Tensor
from popxl.transforms.autodiff import AutodiffError, ExpectedConnectionType, autodiff

Array = np.ndarray[Any, Any]


@dataclass
class OpExample:
    """One application of an op kind: input values, attrs, and the same maths written directly in JAX.

    With `replicas > 1` every input has a leading replica axis, and `reference`
    maps the inputs of all replicas to the outputs of all replicas. For an op
    that updates inputs in place with no output carrying them, the reference
    also gives their new values, after the outputs. `host_inputs`
    gives the data of host-to-device streams by stream id. `rtol`/`atol` bound
    the difference from the reference. Where popxl's gradient rule is not the
    exact VJP of the maths (some collectives), `grad_reference(inputs,
    cotangents)` gives the gradients popxl defines instead, written directly.
    """

    inputs: Sequence[Array]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    reference: Callable[..., Sequence[jax.Array]] | None = None
    replicas: int = 1
    host_inputs: Mapping[str, Array] = field(default_factory=dict)
    grad_reference: Callable[[Sequence[jax.Array], Sequence[jax.Array]], Sequence[jax.Array]] | None = None
    rtol: float = 1e-5
    atol: float = 1e-5


ExampleFactory = Callable[[Ir], OpExample]


def runtime_op_kinds() -> list[str]:
    """The op kinds this runtime registers (extensions registered by other packages aside), sorted."""
    return sorted(name for name, opdef in REGISTRY.items() if opdef.origin.startswith("popxl."))


def _initial(resource: Resource, num_host_transfers: int) -> Any:
    if isinstance(resource, RemoteBuffer):
        rng = np.random.default_rng(resource.remote_buffer_id)
        shape = (resource.entries, *resource.tensor_shape)
        return jnp.asarray(rng.normal(size=shape).astype(resource.tensor_dtype.as_numpy()))
    if isinstance(resource, HostToDeviceStream):
        return jnp.int32(0)
    if isinstance(resource, DeviceToHostStream):
        return HostOutput(jnp.zeros((num_host_transfers, *resource.shape), resource.dtype.as_numpy()), jnp.int32(0))
    return CheckState(jnp.int32(0), jnp.int32(0))


def _world(graphs: Sequence[Graph]) -> World:
    used = frozenset().union(*(graph_reads(g) | graph_writes(g) for g in graphs))
    return World({r: _initial(r, 2) for r in used | {CHECK_RESULT}})


def _build(
    opdef: OpDef, factory: ExampleFactory, inputs: Callable[[OpExample], Sequence[Array]] | None = None
) -> tuple[Ir, Graph, Op, OpExample]:
    ir = Ir(replication=2)
    with ir.main_graph:
        example = factory(ir)
        if inputs is not None:
            example = replace(example, inputs=list(inputs(example)))
    graph = ir.create_empty_graph(f"sweep_{opdef.name}")
    with graph:
        xs = [
            graph_input(np.shape(v), dtypes.as_dtype(np.asarray(v)), f"x{i}")
            for i, v in enumerate(_per_replica(example))
        ]
        op = add_op(opdef, xs, example.attrs)
        for t in op.outputs:
            graph_output(t)
    return ir, graph, op, example


def _per_replica(example: OpExample) -> list[Array]:
    return [np.asarray(v)[0] if example.replicas > 1 else np.asarray(v) for v in example.inputs]


def _mapped(fn: Callable[..., Any], op: Op, replicas: int) -> Callable[..., Any]:
    if replicas == 1:
        return fn
    mesh = ReplicaMesh(replicas, op.groupings)
    if len(mesh.axis_names) != 1:
        raise ValueError("Sweep examples with replicas use groupings of all replicas")
    return jax.vmap(fn, axis_name=mesh.axis_names[0])


def _context(graphs: Sequence[Graph], op: Op, example: OpExample) -> LoweringContext:
    mesh = ReplicaMesh(example.replicas, op.groupings)
    host_inputs = {k: jnp.asarray(v) for k, v in example.host_inputs.items()}
    return LoweringContext(_world(graphs), host_inputs, mesh, CheckSites())


def check_shape_rule(opdef: OpDef, factory: ExampleFactory) -> None:
    """The shape rule is pure and agrees with `jax.eval_shape` of the lowering; declared writes are made."""
    _, graph, op, example = _build(opdef, factory)
    specs = [t.spec for t in op.inputs]
    given = dict(example.attrs)
    snapshot = {k: list(v) if isinstance(v, list) else v for k, v in given.items()}
    normal, out_specs = opdef.signature(specs, MappingProxyType(given))
    assert given == snapshot, f"{opdef.name}: the shape rule changed its attrs"
    contexts: list[LoweringContext] = []

    def lower(*values: jax.Array) -> Sequence[jax.Array]:
        ctx = _context([graph], op, example)
        contexts.append(ctx)
        return opdef.lower(ctx, normal, *values)

    lowered = jax.eval_shape(_mapped(lower, op, example.replicas), *(np.asarray(v) for v in example.inputs))
    unaliased = [i for i, o in op.modifies.items() if o is None]
    assert len(lowered) == len(out_specs) + len(unaliased), (
        f"{opdef.name}: the lowering returned {len(lowered)} values for {len(out_specs)} outputs "
        f"and {len(unaliased)} modified inputs"
    )
    lead = (example.replicas,) if example.replicas > 1 else ()
    for k, (spec, got) in enumerate(zip(out_specs, lowered)):
        want = ((*lead, *spec.shape), spec.dtype.as_numpy())
        assert (tuple(got.shape), got.dtype) == want, f"{opdef.name} output {k}: declared {want}, lowered {got}"
    (ctx,) = contexts
    assert ctx.world.written == set(op.writes), (
        f"{opdef.name}: declares writes {set(op.writes)} but its lowering wrote {ctx.world.written}"
    )


def check_values(opdef: OpDef, factory: ExampleFactory) -> None:
    """The lowering's outputs, and the new values of inputs updated in place with no output, equal the reference's."""
    _, graph, op, example = _build(opdef, factory)
    if example.reference is None:
        return

    def lower(*values: jax.Array) -> Sequence[jax.Array]:
        ctx = _context([graph], op, example)
        return opdef.lower(ctx, op.attrs, *values)

    got = _mapped(lower, op, example.replicas)(*(jnp.asarray(v) for v in example.inputs))
    want = example.reference(*(jnp.asarray(v) for v in example.inputs))
    assert len(got) == len(want), f"{opdef.name}: {len(got)} outputs, the reference gives {len(want)}"
    _assert_close(got, want, example, [f"{opdef.name} output {k}" for k in range(len(want))])
    if opdef.aliasing.view_update is not None:
        _check_view_update(opdef, op.attrs, [jnp.asarray(v) for v in example.inputs], got[0])


def _assert_close(got: Sequence[Any], want: Sequence[Any], example: OpExample, labels: Sequence[str]) -> None:
    """Each of `got` equals its `want` within the example's tolerances, compared in float64."""
    for g, w, label in zip(got, want, labels):
        np.testing.assert_allclose(
            np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=example.rtol, atol=example.atol, err_msg=label
        )


def _check_view_update(opdef: OpDef, attrs: Mapping[str, Any], inputs: list[jax.Array], view: jax.Array) -> None:
    """Writing a view's own value changes nothing; writing a new value makes the view read it back."""
    update = opdef.aliasing.view_update
    assert update is not None
    same = update(attrs, inputs, view)
    for k, (a, b) in enumerate(zip(same, inputs, strict=True)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=f"{opdef.name}: input {k} changed")
    new = jnp.asarray(np.random.default_rng(0).normal(size=view.shape), view.dtype)
    updated = update(attrs, inputs, new)
    reread = opdef.lower(None, attrs, *updated)[0]
    np.testing.assert_array_equal(np.asarray(reread), np.asarray(new), err_msg=f"{opdef.name}: view update lost")


def _gradient_feeds(
    graph: Graph,
    info: GradGraphInfo,
    provided: Sequence[Tensor],
    values: Sequence[jax.Array],
    outs: Sequence[jax.Array],
    dys: Sequence[jax.Array],
) -> list[jax.Array]:
    """The gradient graph's inputs: the cotangent of each provided output, or the forward value it expects."""
    known = dict(zip(graph.inputs, values)) | dict(zip(graph.outputs, outs))
    given = dict(zip(provided, dys))
    return [
        given[ec.fwd_tensor] if ec.connection_type is ExpectedConnectionType.FwdGrad else known[ec.fwd_tensor]
        for ec in info.expected_inputs
    ]


def check_gradient(opdef: OpDef, factory: ExampleFactory, seed: int = 0) -> None:
    """The gradients built by the op's gradient rule equal `jax.vjp` of the reference."""
    _, graph, op, example = _build(opdef, factory)
    assert example.reference is not None, f"{opdef.name}: a differentiable op kind's example needs a reference"
    provided = [t for t in graph.outputs if t.dtype.is_floating_point]
    float_outputs = [k for k, t in enumerate(graph.outputs) if t.dtype.is_floating_point]
    floats = [i for i, t in enumerate(graph.inputs) if t.dtype.is_floating_point]
    inputs = [jnp.asarray(v) for v in example.inputs]

    def reference(*diff: jax.Array) -> list[jax.Array]:
        full = list(inputs)
        for i, v in zip(floats, diff):
            full[i] = v
        assert example.reference is not None
        outs = example.reference(*full)
        return [outs[k] for k in float_outputs]

    rng = np.random.default_rng(seed)
    lead = (example.replicas,) if example.replicas > 1 else ()
    cotangents = [rng.normal(size=(*lead, *t.shape)).astype(t.dtype.as_numpy()) for t in provided]
    if example.grad_reference is not None:
        want = example.grad_reference(inputs, [jnp.asarray(c) for c in cotangents])
    else:
        _, pullback = jax.vjp(reference, *(inputs[i] for i in floats))
        want = pullback([jnp.asarray(c) for c in cotangents])
    try:
        info = autodiff(graph, grads_provided=provided, grads_required=[graph.inputs[i] for i in floats])
    except AutodiffError:
        # No gradient reaches the inputs (a detached op): the reference's must be zero.
        for k, w in enumerate(want):
            assert not np.asarray(w).any(), f"{opdef.name}: no gradient for input {floats[k]}, the reference has one"
        return

    def gradients(inputs: Sequence[jax.Array], dys: Sequence[jax.Array]) -> list[jax.Array]:
        ctx = _context([graph, info.graph], op, example)
        outs, _ = ctx.run_graph(graph, list(inputs))
        grads, _ = ctx.run_graph(info.graph, _gradient_feeds(graph, info, provided, inputs, outs, dys))
        return grads

    got = _mapped(gradients, op, example.replicas)(inputs, [jnp.asarray(c) for c in cotangents])
    assert len(got) == len(want), f"{opdef.name}: {len(got)} gradients for {len(want)} inputs"
    _assert_close(got, want, example, [f"{opdef.name}: gradient of input {floats[k]}" for k in range(len(want))])


def check_flops(opdef: OpDef, factory: ExampleFactory) -> None:
    """The declared FLOP count names popart's op type and is within a factor of 2 of XLA's count of the lowering."""
    _, graph, op, example = _build(opdef, factory)
    declared = op.flops
    assert declared is not None, f"{opdef.name}: declares no FLOP count"
    assert opdef.popart.op_type, (
        f"{opdef.name}: a FLOP count is reported under popart's op type, which it does not name"
    )

    def lower(*values: jax.Array) -> Sequence[jax.Array]:
        return opdef.lower(_context([graph], op, example), op.attrs, *values)

    cost = (
        jax.jit(_mapped(lower, op, example.replicas)).lower(*(jnp.asarray(v) for v in example.inputs)).cost_analysis()
    )
    assert cost is not None, "XLA gives no cost analysis here"
    counted = cost["flops"]
    # XLA counts every step of the lowering as written (a normalisation's casts and square roots too); an estimate
    # may count fewer, but not a different order of magnitude.
    total = declared * example.replicas
    assert counted / 2 <= total <= 2 * counted, f"{opdef.name}: declares {total} FLOPs, XLA counts {counted}"


# A valid value of each IPU-only setting that transforms may set on existing ops (`PopartFacts.ipu_settings`).
_SETTING_VALUES: dict[str, Any] = {
    "available_memory_proportion": 0.25,
    "available_memory_proportions": [0.25],
    "fully_connected_pass": False,
}


def check_ipu_settings(opdef: OpDef, factory: ExampleFactory) -> None:
    """Each IPU-only setting the op kind declares settable is recorded on its op and read back."""
    _, _, op, _ = _build(opdef, factory)
    settings = opdef.popart.ipu_settings
    for name in sorted(settings):
        assert name in _SETTING_VALUES, f"{opdef.name}: {name!r} is not an IPU-only setting transforms set"
        ipu_only.record(op, **{name: _SETTING_VALUES[name]})
    want = {name: _SETTING_VALUES[name] for name in settings}
    got = {name: list(v) if isinstance(v, tuple) else v for name, v in ipu_only.recorded(op).items()}
    assert got == want, f"{opdef.name}: recorded {got}, set {want}"
    if settings & {"available_memory_proportion", "available_memory_proportions"}:
        assert ipu_only.available_memory_proportion(op) == 0.25, f"{opdef.name}: its proportion does not read back"


def check_identity_rewrite(opdef: OpDef, factory: ExampleFactory) -> None:
    """The op kind's identity predicate answers for its example op, which can become an identity keeping its output."""
    _, _, op, _ = _build(opdef, factory)
    identity_when = opdef.popart.identity_when
    assert identity_when is not None, f"{opdef.name}: declares no identity predicate"
    assert isinstance(identity_when(op), bool), f"{opdef.name}: its identity predicate is not a bool"
    (out,) = op.outputs
    replace_with_identity(op)  # refuses a rewrite that would change the output's spec
    assert op.outputs == (out,), f"{opdef.name}: its op's output did not stay"


def _scaled_float16(v: Array, scale: float, power: float) -> Array:
    """A float32 input times `scale ** power` (scalars left alone: hyperparameters, steps, loss scales), in float16."""
    a = np.asarray(v)
    if a.dtype != np.float32:
        return a
    return (a if a.size <= 1 else a * np.float32(scale**power)).astype(np.float16)


Results = tuple[list[Any], list[Any], list[Any]]
_QUICK_COMPILE: dict[str, Any] = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def _op_runner(
    opdef: OpDef, factory: ExampleFactory, inputs: Callable[[OpExample], Sequence[Array]], cotangent_seed: int
) -> tuple[Callable[[Sequence[jax.Array]], Results], OpExample]:
    """A traceable function of an example's input values.

    It gives the graph's outputs, the final values of the floating inputs the op updates in place, and the
    gradients autodiff builds for unit cotangents (rounded to float16, so that runs in any type get the same
    values).
    """
    _, graph, op, example = _build(opdef, factory, inputs)
    provided = [t for t in graph.outputs if t.dtype.is_floating_point]
    floats = [i for i, t in enumerate(graph.inputs) if t.dtype.is_floating_point]
    updated = [i for i in floats if i in op.modifies]
    info = None
    if opdef.grad is not None and provided and floats:
        try:
            info = autodiff(graph, grads_provided=provided, grads_required=[graph.inputs[i] for i in floats])
        except AutodiffError:
            info = None
    rng = np.random.default_rng(cotangent_seed)
    lead = (example.replicas,) if example.replicas > 1 else ()
    dys = [rng.normal(size=(*lead, *t.shape)).astype(np.float16).astype(t.dtype.as_numpy()) for t in provided]

    def run(values: Sequence[jax.Array], dys: Sequence[jax.Array]) -> Results:
        ctx = _context([graph] if info is None else [graph, info.graph], op, example)
        outs, finals = ctx.run_graph(graph, list(values))
        if info is None:
            return outs, [finals[i] for i in updated], []
        grads, _ = ctx.run_graph(info.graph, _gradient_feeds(graph, info, provided, values, outs, dys))
        return outs, [finals[i] for i in updated], grads

    mapped = _mapped(run, op, example.replicas)
    return lambda values: mapped(list(values), [jnp.asarray(d) for d in dys]), example


def _relative_errors(name: str, low: Results, high: Results) -> dict[str, float]:
    errors: dict[str, float] = {}
    for kind, lows, highs in zip(("output", "updated input", "gradient"), low, high):
        assert len(lows) == len(highs), f"{name}: {len(lows)} float16 {kind}s, {len(highs)} in float32"
        for k, (a, b) in enumerate(zip(lows, highs)):
            label = f"{name} {kind} {k}"
            a64, b64 = np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64)
            if not dtypes.as_dtype(np.asarray(b)).is_floating_point:
                np.testing.assert_array_equal(a64, b64, err_msg=label)
                continue
            finite = np.isfinite(b64)
            if not np.isfinite(a64[finite]).all():
                errors[label] = math.inf
                continue
            magnitude = max(float(np.abs(b64[finite]).max(initial=0.0)), 2.0**-14)
            errors[label] = float(np.abs(a64[finite] - b64[finite]).max(initial=0.0)) / magnitude
    return errors


def float16_errors(
    opdef: OpDef,
    factory: ExampleFactory,
    scales: Sequence[float] = (0.02, 1.0),
    powers: Mapping[int, float] | None = None,
    seed: int = 0,
) -> dict[float, dict[str, float]]:
    """How far an op kind's float16 results are from its float32 results on the same float16-rounded inputs.

    For each scale, the example's float32 inputs are multiplied by it (input i by `scale ** powers[i]` where
    given: 0 for coordinates or probabilities, 2 for a variance; scalars, such as hyperparameters, steps and
    loss scales, keep their values) and rounded to float16; the op then runs on them as float16 and, cast
    back, as float32. For each output, each floating input the op updates in place, and each gradient
    autodiff builds, the result is the largest difference relative to the float32 result's magnitude (taken
    as at least float16's smallest normal, 2**-14): 0 where the results are equal, infinity where the float16
    result is not finite where the float32 one is. Integer and bool results must be equal. An op kind with no
    float32 input gives no errors. Everything runs as one jitted program per op kind.
    """
    raw: list[Array] = []

    def rounded(scale: float) -> list[Array]:
        return [_scaled_float16(v, scale, (powers or {}).get(i, 1)) for i, v in enumerate(raw)]

    def half(example: OpExample) -> list[Array]:
        raw[:] = [np.asarray(v) for v in example.inputs]
        return rounded(scales[0])

    def single(values: Sequence[Any]) -> list[Any]:
        return [v.astype(np.float32) if o.dtype == np.float32 else v for v, o in zip(values, raw)]

    low, _ = _op_runner(opdef, factory, half, seed)
    if not any(v.dtype == np.float32 for v in raw):
        return {}
    high, _ = _op_runner(opdef, factory, lambda example: single(rounded(scales[0])), seed)

    def every_scale(values: Sequence[Sequence[jax.Array]]) -> list[tuple[Results, Results]]:
        return [(low(v), high(single(v))) for v in values]

    values = [[jnp.asarray(v) for v in rounded(scale)] for scale in scales]
    # Compiled without LLVM's optimisations, which change no rounding and cost most of the time on small programs.
    runs = jax.jit(every_scale).lower(values).compile(_QUICK_COMPILE)(values)
    return {scale: _relative_errors(opdef.name, *run) for scale, run in zip(scales, runs)}


def check_op(opdef: OpDef, factory: ExampleFactory) -> None:
    """Every registry check of one op kind on one example."""
    check_shape_rule(opdef, factory)
    check_values(opdef, factory)
    if opdef.grad is not None:
        check_gradient(opdef, factory)
    if opdef.popart.flops is not None:
        check_flops(opdef, factory)
    if opdef.popart.ipu_settings:
        check_ipu_settings(opdef, factory)
    if opdef.popart.identity_when is not None:
        check_identity_rewrite(opdef, factory)
