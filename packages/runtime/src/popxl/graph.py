"""Graphs: ordered ops over tensors, and tracing Python functions into them."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from popxl import context
from popxl.errors import NO_POPART_IR, NoPopartIRError
from popxl.op import Attrs, Op, OpDef, Subgraph, check_inputs
from popxl.tensor import Constant, Tensor, TensorSpec, Variable

if TYPE_CHECKING:
    from popxl.ir import Ir


class Graph:
    """A graph of ops; the main graph or a subgraph that can be called or repeated."""

    def __init__(self, ir: Ir, graph_id: str, name: str | None = None) -> None:
        self._ir = ir  # popxl's attribute; applications call `graph._ir.create_graph`
        self._id = graph_id
        self._name = name if name is not None else graph_id
        self._tensor_prefix = graph_id + "/" if graph_id else ""
        self._inputs: list[Tensor] = []
        self._outputs: list[Tensor] = []
        self._ops: list[Op] = []
        self._tensors: list[Tensor] = []
        self._ids: set[str] = set()
        self._by_ref_inputs: set[Tensor] = set()
        self._call_sites: list[Op] = []
        # False for graphs whose gradient a user defines: autodiff of a caller must be given it.
        self.recursive_autodiff = True

    @property
    def ir(self) -> Ir:
        """The Ir the graph belongs to."""
        return self._ir

    @property
    def id(self) -> str:
        """The graph's id, `<base>_subgraph(<k>)` for subgraphs."""
        return self._id

    @property
    def name(self) -> str:
        """The graph's name."""
        return self._name

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """The graph inputs in order."""
        return tuple(self._inputs)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """The graph outputs in order."""
        return tuple(self._outputs)

    @property
    def ops(self) -> tuple[Op, ...]:
        """The ops in creation order (the order they execute in)."""
        return tuple(self._ops)

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        """Every tensor owned by the graph."""
        return tuple(self._tensors)

    @property
    def constants(self) -> tuple[Constant, ...]:
        """The constants owned by the graph."""
        return tuple(t for t in self._tensors if isinstance(t, Constant))

    @property
    def variables(self) -> tuple[Variable, ...]:
        """The variables owned by the graph (main graph only)."""
        return tuple(t for t in self._tensors if isinstance(t, Variable))

    @property
    def _pb_graph(self) -> NoReturn:
        """popxl's handle on popart's C++ graph, which this runtime does not have: raises NoPopartIRError."""
        # Custom-op wrappers and IR-inspecting tests reach popart through this first; say why it is absent.
        name = self.id or "the main graph"
        raise NoPopartIRError(
            f"Graph._pb_graph is popart's C++ graph ({name}), which does not exist here: {NO_POPART_IR}"
        )

    def __contains__(self, t: object) -> bool:
        return isinstance(t, Tensor) and t.graph is self

    def __enter__(self) -> Graph:
        context.push_graph(self)
        return self

    def __exit__(self, *exc: object) -> None:
        context.pop_graph()

    def __repr__(self) -> str:
        return f"Graph[{self._name}: {len(self._inputs)} inputs, {len(self._ops)} ops, {len(self._outputs)} outputs]"

    def take_id(self, name: str) -> str:
        """A fresh tensor id for `name` in this graph: the graph's prefix and `name`, with popxl's
        `__t<c>` suffix when that id is taken already.

        Ops take the ids of tensors popxl creates and this runtime does not, so that later tensors get
        the ids they get in popxl.
        """
        tid = self._tensor_prefix + name
        if tid in self._ids:
            tid = f"{tid}__t{self.ir.next_dedup()}"
        self._ids.add(tid)
        return tid

    def add_tensor(self, t: Tensor) -> None:
        """Count `t`, a new tensor of this graph, among its tensors (the Tensor constructor calls this)."""
        if t.graph is not self:
            raise ValueError(f"{t.id} belongs to graph {t.graph.id!r}, not {self.id!r}")
        self._tensors.append(t)

    def add_op(
        self,
        opdef: OpDef,
        inputs: Sequence[Tensor],
        attrs: Attrs | None = None,
        names: Sequence[str | None] | None = None,
    ) -> Op:
        """A new last op of kind `opdef` reading `inputs` (tensors of this graph), its attrs normalised and
        its outputs inferred by the op kind; `names` name the outputs, under the open name scopes."""
        check_inputs(self, inputs, f"op '{opdef.name}'")
        normal, specs = opdef.signature([t.spec for t in inputs], attrs or {})
        scope = context.name_scope_prefix()
        outputs = []
        for i, spec in enumerate(specs):
            given = names[i] if names is not None and i < len(names) else None
            outputs.append(Tensor(self, scope + (given or opdef.out_name(i)), spec))
        op = Op(opdef, self, tuple(inputs), tuple(outputs), normal, context.current_placement(self))
        op.index = len(self._ops)
        op.id = self.ir.next_op_id()
        self._ops.append(op)
        for t in op.outputs:
            t.producer = op
        for sub in op.subgraphs:
            sub.graph._call_sites.append(op)
        context.record_sequenced(self, op)
        return op

    def rewrite_op(
        self,
        op: Op,
        *,
        opdef: OpDef | None = None,
        inputs: Sequence[Tensor] | None = None,
        attrs: Attrs | None = None,
        names: Sequence[str] = (),
    ) -> None:
        """Change `op`'s kind, inputs or attrs (those given), re-running the op kind's attr and shape checks.

        The op keeps its place and its outputs, whose specs must not change; outputs the op kind now infers
        beyond them are added, named by `names` (default: the op kind's output names). Nothing changes if
        a check fails. This is the one way the runtime and its extensions change an op after creation.
        """
        if op.graph is not self or not any(mine is op for mine in self._ops):
            raise ValueError(f"Cannot rewrite {op}: it is not an op of graph {self.id!r}")
        kind = opdef if opdef is not None else op.opdef
        new_inputs = tuple(op.inputs if inputs is None else inputs)
        check_inputs(self, new_inputs, f"the rewrite of {op}")
        normal, specs = kind.signature([t.spec for t in new_inputs], op.attrs if attrs is None else attrs)
        if len(specs) < len(op.outputs):
            raise ValueError(f"Cannot rewrite {op} into {kind.name!r}: it would drop outputs ({len(specs)} inferred)")
        for t, spec in zip(op.outputs, specs):
            if (t.shape, t.dtype) != (spec.shape, spec.dtype):
                raise ValueError(
                    f"Cannot rewrite {op} into {kind.name!r}: its output {t.id} ({t.dtype.name} {t.shape}) "
                    f"would become {spec.dtype.name} {spec.shape}"
                )
        added = []
        for i, spec in enumerate(specs[len(op.outputs) :], start=len(op.outputs)):
            k = i - len(op.outputs)
            added.append(Tensor(self, names[k] if k < len(names) else kind.out_name(i), spec))
        before = {id(sub.graph): sub.graph for sub in op.subgraphs}
        op.opdef, op.inputs, op.attrs = kind, new_inputs, normal
        op.outputs = (*op.outputs, *added)
        for t in added:
            t.producer = op
        after = {id(sub.graph): sub.graph for sub in op.subgraphs}
        for key, g in before.items():
            if key not in after:
                g._call_sites = [site for site in g._call_sites if site is not op]
        for key, g in after.items():
            if key not in before:
                g._call_sites.append(op)

    def _add_input(self, t: Tensor, by_ref: bool = False) -> None:
        self._inputs.append(t)
        if by_ref:
            self._by_ref_inputs.add(t)

    @property
    def call_sites(self) -> tuple[Op, ...]:
        """The ops that run this graph (calls, loops), in creation order."""
        return tuple(self._call_sites)

    @property
    def called_graphs(self) -> tuple[Graph, ...]:
        """The graphs this graph's ops run (not those they run in turn), each once, in the order first run."""
        found: dict[int, Graph] = {}
        for op in self._ops:
            for sub in op.subgraphs:
                found.setdefault(id(sub.graph), sub.graph)
        return tuple(found.values())

    def remove_ops(self, removed: Iterable[Op]) -> None:
        """Take `removed` (ops of this graph) out of it, and out of the call sites of the graphs they run.

        Their outputs stay in the graph with no producer: an op still reading one is refused.
        """
        gone = {id(op): op for op in removed}
        strangers = [op.name for op in gone.values() if not any(op is mine for mine in self._ops)]
        if strangers:
            raise ValueError(f"Cannot remove ops {strangers} from graph {self.id!r}: they are not its ops")
        orphaned = {id(t) for op in gone.values() for t in op.outputs}
        readers = [op.name for op in self._ops if id(op) not in gone and any(id(t) in orphaned for t in op.inputs)]
        if readers:
            raise ValueError(f"Cannot remove ops from graph {self.id!r}: ops {readers} read their outputs")
        for op in gone.values():
            for sub in op.subgraphs:
                sub.graph._call_sites = [site for site in sub.graph._call_sites if id(site) not in gone]
        self._ops = [op for op in self._ops if id(op) not in gone]
        for i, op in enumerate(self._ops):
            op.index = i

    def is_by_ref(self, t: Tensor) -> bool:
        """Whether graph input `t` is passed by reference (its callers see its in-place updates)."""
        return t in self._by_ref_inputs

    def add_output(self, t: Tensor) -> None:
        """Make `t` the next output of this graph, and of every op already running it.

        An op whose outputs follow the graph's (a call) gains the output. One that runs the graph otherwise
        takes it only where its op kind infers the extra output and its checks pass: a loop, whose output
        `i` is carried into input `i`, takes an output that matches the input it is carried into, as popxl
        builds it; a conditional's branch refuses one. Nothing changes when an op refuses.
        """
        if t.graph is not self:
            raise ValueError(f"{t.id} is not in graph {self.id!r} and cannot be one of its outputs")
        self._outputs.append(t)
        for site in self._call_sites:
            if all(sub.outputs_follow for sub in self._runs(site)):
                continue
            try:
                _, specs = site.opdef.signature([x.spec for x in site.inputs], site.attrs)
                refusal = None if len(specs) == len(site.outputs) + 1 else "its outputs do not follow the graph's"
            except ValueError as e:
                refusal = str(e)
            if refusal is not None:
                self._outputs.pop()
                raise ValueError(f"Cannot add {t.id} to the outputs of {self.id!r}: it is run by {site}: {refusal}")
        for site in self._call_sites:
            site.graph.rewrite_op(site, names=[t.name])

    def add_input_from_callers(
        self, name: str, spec: TensorSpec, parent_of: Callable[[Op], Tensor], by_ref: bool = False
    ) -> Tensor:
        """A new last input of this graph, fed at every op already running it by `parent_of(op)` (a tensor of
        the op's graph); with `by_ref`, the graph's in-place updates of it reach those tensors.

        Only ops whose inputs follow their graph's (calls, loops) take new inputs: others refuse.
        """
        for site in self._call_sites:
            if not all(sub.inputs_follow for sub in self._runs(site)):
                raise ValueError(f"Cannot add an input to {self.id!r}: it is run by {site}, which takes no new inputs")
        parents = [(site, parent_of(site)) for site in self._call_sites]
        for site, parent in parents:
            if parent.graph is not site.graph or (parent.shape, parent.dtype) != (spec.shape, spec.dtype):
                raise ValueError(f"{parent} cannot feed a new input {spec} of {self.id!r} at {site}")
        with self:
            t = graph_input(spec.shape, spec.dtype, name, by_ref, spec.meta_shape)
        for site, parent in parents:
            site.graph.rewrite_op(site, inputs=[*site.inputs, parent])
        return t

    def keep_outputs(self, count: int) -> None:
        """Drop every output after the first `count` (only while no op runs the graph)."""
        self._require_no_call_sites("drop outputs of")
        if not 0 <= count <= len(self._outputs):
            raise ValueError(f"Graph {self.id!r} has {len(self._outputs)} outputs, cannot keep {count}")
        del self._outputs[count:]

    def reorder_inputs(self, order: Iterable[Tensor]) -> None:
        """Put the graph's inputs in the given order (only while no op runs the graph)."""
        self._require_no_call_sites("reorder the inputs of")
        new = list(order)
        if len(new) != len(self._inputs) or {id(t) for t in new} != {id(t) for t in self._inputs}:
            raise ValueError(f"The new input order of {self.id!r} is not a permutation of its inputs")
        self._inputs = new

    def _runs(self, site: Op) -> list[Subgraph]:
        """How op `site` runs this graph, as its op kind declares."""
        return [sub for sub in site.subgraphs if sub.graph is self]

    def _require_no_call_sites(self, what: str) -> None:
        if self._call_sites:
            raise ValueError(f"Cannot {what} {self.id!r}: {self._call_sites[0]} already runs it")


def graph_input(
    shape: Iterable[int],
    dtype: Any,
    name: str | None = None,
    by_ref: bool = False,
    meta_shape: Iterable[int] | None = None,
) -> Tensor:
    """Add an input to the current graph."""
    g = context.gcg()
    t = Tensor(g, context.name_scope_prefix() + (name or "t"), TensorSpec(tuple(shape), dtype, tuple(meta_shape or ())))
    g._add_input(t, by_ref)
    return t


def graph_output(t: Tensor) -> None:
    """Mark `t` as the next output of the current graph."""
    g = context.gcg()
    if not isinstance(t, Tensor):
        raise TypeError(f"graph_output takes a Tensor, got {t!r}")
    g.add_output(t)


def _is_by_ref(annotation: Any) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return "TensorByRef" in text


def _input_from(value: Tensor | TensorSpec, name: str, by_ref: bool) -> Tensor:
    spec = value.spec if isinstance(value, Tensor) else value
    return graph_input(spec.shape, spec.dtype, name, by_ref, spec.meta_shape)


def _is_tensor_like(v: Any) -> bool:
    return isinstance(v, Tensor | TensorSpec)


def trace(graph: Graph, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Trace `fn` into `graph`: tensor arguments become inputs, returned tensors outputs."""
    try:
        sig = inspect.signature(fn)
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise ValueError(f"Arguments do not match the signature of {fn!r}: {e}") from e
    with graph, context.fresh_name_scopes():
        for pname, value in list(bound.arguments.items()):
            param = sig.parameters[pname]
            by_ref = _is_by_ref(param.annotation)
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                _unmixed(pname, value)
                bound.arguments[pname] = tuple(
                    _input_from(v, f"{pname}_{i}", by_ref) if _is_tensor_like(v) else v for i, v in enumerate(value)
                )
            elif param.kind is inspect.Parameter.VAR_KEYWORD:
                _unmixed(pname, value.values())
                bound.arguments[pname] = {
                    k: _input_from(v, k, by_ref) if _is_tensor_like(v) else v for k, v in value.items()
                }
            else:
                bound.arguments[pname] = _trace_arg(pname, value, by_ref)
        # BoundArguments passes a parameter by keyword once an earlier one was left to its default.
        result = fn(*bound.args, **bound.kwargs)
        for t in _outputs_of(fn, result):
            graph_output(t)


def _unmixed(pname: str, values: Iterable[Any]) -> None:
    """Refuse, as popxl does, a list, `*args` or `**kwargs` holding tensors beside other values."""
    values = list(values)
    if any(_is_tensor_like(v) for v in values) and not all(_is_tensor_like(v) for v in values):
        raise TypeError(f"Argument {pname!r} mixes tensors with other values: {values!r}")


def _trace_arg(pname: str, value: Any, by_ref: bool) -> Any:
    if _is_tensor_like(value):
        return _input_from(value, pname, by_ref)
    if isinstance(value, list | tuple) and any(_is_tensor_like(v) for v in value):
        _unmixed(pname, value)
        return [_input_from(v, f"{pname}_{i}", by_ref) for i, v in enumerate(value)]
    return value


def _outputs_of(fn: Any, result: Any) -> list[Tensor]:
    if result is None:
        return []
    if isinstance(result, Tensor):
        return [result]
    if isinstance(result, Iterable) and not isinstance(result, str | bytes):
        items = list(result)
        if all(isinstance(t, Tensor) for t in items):
            return items
    raise ValueError(f"{fn!r} must return None, a Tensor or an iterable of Tensors, not {result!r}")
