"""Calling and repeating subgraphs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from popxl import context, ipu_only
from popxl.creation import constant
from popxl.graph import Graph
from popxl.op import Op, OpDef, add_op
from popxl.opdefs.call import CALL, CONDITIONAL, REPEAT, by_ref_indices
from popxl.tensor import Tensor


class CallSiteInfo:
    """How one call of a subgraph connects to its parent graph."""

    def __init__(self, op: Op) -> None:
        self._op = op

    @property
    def called_graph(self) -> Graph:
        """The graph that is called."""
        graph: Graph = self._op.attrs["graph"]
        return graph

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """The parent tensors fed to the called graph's inputs."""
        return tuple(self._op.inputs)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """The parent tensors receiving the called graph's outputs."""
        return tuple(self._op.outputs)

    def parent_input(self, index: int) -> Tensor:
        """The parent tensor fed to graph input `index`."""
        return self._op.inputs[index]

    def parent_output(self, index: int) -> Tensor:
        """The parent tensor receiving graph output `index`."""
        return self._op.outputs[index]

    def graph_to_parent(self, t: Tensor) -> Tensor:
        """The parent tensor connected to graph input or output `t`."""
        g = self.called_graph
        for graph_tensors, parents in ((g.inputs, self._op.inputs), (g.outputs, self._op.outputs)):
            for i, graph_tensor in enumerate(graph_tensors):
                if graph_tensor is t:
                    return parents[i]
        raise ValueError(f"{t} is neither an input nor an output of {g.id!r}")

    def parent_to_graph(self, p: Tensor) -> Tensor:
        """The graph input fed by the first occurrence of parent tensor `p`."""
        for i, t in enumerate(self._op.inputs):
            if t is p:
                return self.called_graph.inputs[i]
        raise ValueError(f"{p} is not an input of this call of {self.called_graph.id!r}")

    def graph_to_parent_input_index(self, index: int) -> int:
        """Graph input index to call-site input index (the identity for a call)."""
        return index

    def parent_to_graph_input_index(self, index: int) -> int:
        """Call-site input index to graph input index (the identity for a call)."""
        return index

    def graph_to_parent_output_index(self, index: int) -> int:
        """Graph output index to call-site output index (the identity for a call)."""
        return index

    def parent_to_graph_output_index(self, index: int) -> int:
        """Call-site output index to graph output index (the identity for a call)."""
        return index

    def set_parent_input_modified(self, p: Tensor, infer_modified_regions: bool = False) -> None:
        """Mark parent tensor `p` as modified by this call: the graph's in-place updates of it reach `p`.

        The call writes the graph input's final value back to `p` whole; popart's
        `infer_modified_regions` (narrowing the aliased region for its own analysis) changes no value, and
        is recorded only (`popxl.ipu_only`)."""
        if not all(sub.outputs_follow for sub in self._op.subgraphs):
            raise TypeError(f"Only a call's parent inputs can be marked modified, not those of {self._op}")
        ipu_only.record(self._op, infer_modified_regions=infer_modified_regions)
        index = next((i for i, t in enumerate(self._op.inputs) if t is p), None)
        if index is None:
            raise ValueError(f"{p} is not an input of this call of {self.called_graph.id!r}")
        modified = sorted({*self._op.attrs["modified"], index})
        self._op.graph.rewrite_op(self._op, attrs={**self._op.attrs, "modified": tuple(modified)})

    @property
    def op(self) -> Op:
        """The call op."""
        return self._op


def _coerce(value: Any, graph_input: Tensor, parent: Graph) -> Tensor:
    if isinstance(value, Tensor):
        if value.graph is not parent:
            raise ValueError(f"{value.id} fed to {graph_input.id} is not in the calling graph {parent.id!r}")
        if (value.shape, value.dtype) != (graph_input.shape, graph_input.dtype):
            raise ValueError(
                f"{value.id} ({value.dtype.name} {value.shape}) fed to graph input {graph_input.id} "
                f"which expects {graph_input.dtype.name} {graph_input.shape}"
            )
        return value
    try:
        data = np.asarray(value, dtype=graph_input.dtype.as_numpy())
    except (TypeError, ValueError) as e:
        raise TypeError(f"Cannot feed {value!r} to graph input {graph_input.id}") from e
    if data.size == 0:
        raise TypeError(f"Cannot feed an empty value to graph input {graph_input.id}")
    return constant(data, graph_input.dtype)


def bind_inputs(
    graph: Graph, inputs: Sequence[Any], inputs_dict: Mapping[Tensor, Any] | None, check_inputs: bool = True
) -> list[Tensor]:
    """The parent tensors for each input of `graph`, from positional and keyed values.

    popxl's `check_inputs=True` raises here when an input is missing. With `check_inputs=False` popxl
    skips that check and creates the op with the input unconnected, which popart can only reject later;
    an op here feeds every graph input, so a missing one is refused at once all the same, by an error
    that names `check_inputs=False`.
    """
    parent = context.gcg()
    graph_inputs = graph.inputs
    position = {t: i for i, t in enumerate(graph_inputs)}
    flat: list[Any] = []
    for v in inputs:
        flat.extend(v if isinstance(v, list | tuple) else [v])
    if len(flat) > len(graph_inputs):
        raise ValueError(f"{len(flat)} inputs given but graph {graph.id!r} has only {len(graph_inputs)}")
    bound = {i: _coerce(v, graph_inputs[i], parent) for i, v in enumerate(flat)}
    for k, v in (inputs_dict or {}).items():
        i = position.get(k) if isinstance(k, Tensor) else None
        if i is None:
            raise ValueError(f"{k!r} is not an input of graph {graph.id!r}")
        if i in bound:
            raise ValueError(f"Input {k.id} of graph {graph.id!r} is given twice")
        bound[i] = _coerce(v, k, parent)
    missing = [t.id for i, t in enumerate(graph_inputs) if i not in bound]
    if missing:
        connected = [t.id for i, t in enumerate(graph_inputs) if i in bound]
        if not check_inputs:
            raise ValueError(
                f"check_inputs=False: graph {graph.id!r} would run with inputs {missing} unconnected, as "
                f"popxl would build it; this runtime connects every graph input when the op is created, so "
                f"provide them all (connected: {connected})"
            )
        raise ValueError(f"Graph {graph.id!r} is missing inputs.\n  missing: {missing}\n  connected: {connected}")
    return [bound[i] for i in range(len(graph_inputs))]


def _create(kind: OpDef, graph: Graph, parents: list[Tensor], attrs: dict[str, Any]) -> Op:
    return add_op(kind, parents, {"graph": graph, **attrs}, names=[t.name for t in graph.outputs])


def call_with_info(
    graph: Graph, *inputs: Any, inputs_dict: Mapping[Tensor, Any] | None = None, check_inputs: bool = True
) -> CallSiteInfo:
    """Call `graph` and return the call site's info (see `bind_inputs` for `check_inputs`)."""
    parents = bind_inputs(graph, inputs, inputs_dict, check_inputs)
    return CallSiteInfo(_create(CALL, graph, parents, {"modified": by_ref_indices(graph)}))


def call(graph: Graph, *inputs: Any, inputs_dict: Mapping[Tensor, Any] | None = None) -> tuple[Tensor, ...]:
    """Call `graph` and return its outputs in the current graph."""
    return call_with_info(graph, *inputs, inputs_dict=inputs_dict).outputs


def repeat(
    graph: Graph, repeat_count: int, *inputs: Any, inputs_dict: Mapping[Tensor, Any] | None = None
) -> tuple[Tensor, ...]:
    """Run `graph` `repeat_count` times; its K outputs feed its first K inputs on each next run."""
    return repeat_with_info(graph, repeat_count, *inputs, inputs_dict=inputs_dict).outputs


def repeat_with_info(
    graph: Graph,
    repeat_count: int,
    *inputs: Any,
    inputs_dict: Mapping[Tensor, Any] | None = None,
    check_inputs: bool = True,
) -> CallSiteInfo:
    """`repeat`, returning the loop's call-site info (`check_inputs` as for `call_with_info`)."""
    if repeat_count < 0:
        raise ValueError(f"repeat_count must be >= 0, got {repeat_count}")
    parents = bind_inputs(graph, inputs, inputs_dict, check_inputs)
    # popxl (python/popxl/ops/repeat.py, _setup_outputs) names each output after the graph's, made
    # unique by the Ir's counter twice (the loop body's output, then the loop's): `<name>__t<c+1>`,
    # without the name scopes open at the call.
    ir = context.gir()
    names = []
    for t in graph.outputs:
        ir.next_dedup()
        names.append(f"{t.name}__t{ir.next_dedup()}")
    with context.fresh_name_scopes():
        op = add_op(REPEAT, parents, {"graph": graph, "count": int(repeat_count)}, names=names)
    return CallSiteInfo(op)


class ConditionalSiteInfo(CallSiteInfo):
    """How one conditional connects its two branches to its parent graph (input 0 is the condition)."""

    @property
    def called_graph(self) -> tuple[Graph, Graph]:  # type: ignore[override]
        """The `then_branch` and `else_branch` graphs."""
        return self._op.attrs["then_branch"], self._op.attrs["else_branch"]

    def _offset(self, then_branch: bool) -> int:
        return 1 if then_branch else 1 + len(self.called_graph[0].inputs)

    def graph_to_parent_input_index(self, idx: int, then_branch: bool = True) -> int:
        """The op input index of input `idx` of the then (or else) branch."""
        graph = self.called_graph[0 if then_branch else 1]
        if not 0 <= idx < len(graph.inputs):
            raise IndexError("Invalid graph input index")
        return self._offset(then_branch) + idx

    def parent_to_graph_input_index(self, idx: int) -> int:
        """The branch input index fed by op input `idx`."""
        n_then = len(self.called_graph[0].inputs)
        if not 1 <= idx < len(self._op.inputs):
            raise IndexError("Invalid parent graph input index")
        return idx - 1 if idx <= n_then else idx - 1 - n_then

    def is_parent_index_in_then_branch(self, idx: int) -> bool:
        """Whether op input `idx` feeds the then branch (rather than the else branch)."""
        if not 1 <= idx < len(self._op.inputs):
            raise IndexError("Invalid parent graph input index")
        return idx <= len(self.called_graph[0].inputs)

    def graph_to_parent_output_index(self, idx: int, then_branch: bool = True) -> int:
        """Branch output `idx` is op output `idx`, in either branch."""
        if not 0 <= idx < len(self._op.outputs):
            raise IndexError("Invalid graph output index")
        return idx

    def parent_to_graph_output_index(self, idx: int, then_branch: bool = True) -> int:
        """Op output `idx` is branch output `idx`, in either branch."""
        return self.graph_to_parent_output_index(idx, then_branch)

    def graph_to_parent(self, t: Tensor) -> Tensor:
        """The parent tensor connected to an input or output of either branch."""
        for then_branch, graph in zip((True, False), self.called_graph):
            for i, graph_tensor in enumerate(graph.inputs):
                if graph_tensor is t:
                    return self._op.inputs[self.graph_to_parent_input_index(i, then_branch)]
            for i, graph_tensor in enumerate(graph.outputs):
                if graph_tensor is t:
                    return self._op.outputs[i]
        raise ValueError(f"Tensor {t.name} is not an input or output of the called graph(s).")

    def parent_to_graph(self, p: Tensor) -> Tensor:
        """The branch input fed by the first occurrence of parent tensor `p` (the condition excluded)."""
        for idx, t in enumerate(self._op.inputs[1:], start=1):
            if t is p:
                graph = self.called_graph[0 if self.is_parent_index_in_then_branch(idx) else 1]
                return graph.inputs[self.parent_to_graph_input_index(idx)]
        raise ValueError(f"Tensor {p.name} is not a parent graph input of the call site.")

    def set_parent_input_modified(self, p: Tensor, infer_modified_regions: bool = True) -> None:
        """Not available for conditionals, as in popxl."""
        raise NotImplementedError("Parent input modification is not yet implemented for the conditional op.")


def conditional_with_info(
    cond: Tensor,
    then_branch: Graph,
    else_branch: Graph,
    then_inputs: Sequence[Any] | None = None,
    else_inputs: Sequence[Any] | None = None,
    then_inputs_dict: Mapping[Tensor, Any] | None = None,
    else_inputs_dict: Mapping[Tensor, Any] | None = None,
    check_inputs: bool = True,
) -> ConditionalSiteInfo:
    """Run `then_branch` if the single bool `cond` is true, else `else_branch`; returns the site's info."""
    then_parents = bind_inputs(then_branch, then_inputs or (), then_inputs_dict, check_inputs)
    else_parents = bind_inputs(else_branch, else_inputs or (), else_inputs_dict, check_inputs)
    names = [f"{a.name}_or_{b.name}" for a, b in zip(then_branch.outputs, else_branch.outputs)]
    attrs = {"then_branch": then_branch, "else_branch": else_branch}
    return ConditionalSiteInfo(add_op(CONDITIONAL, [cond, *then_parents, *else_parents], attrs, names=names))


def conditional(
    cond: Tensor,
    then_branch: Graph,
    else_branch: Graph,
    then_inputs: Sequence[Any] | None = None,
    else_inputs: Sequence[Any] | None = None,
    then_inputs_dict: Mapping[Tensor, Any] | None = None,
    else_inputs_dict: Mapping[Tensor, Any] | None = None,
) -> tuple[Tensor, ...]:
    """Outputs of `then_branch` if the single bool `cond` is true, else of `else_branch` (same specs)."""
    info = conditional_with_info(
        cond, then_branch, else_branch, then_inputs, else_inputs, then_inputs_dict, else_inputs_dict
    )
    return info.outputs
