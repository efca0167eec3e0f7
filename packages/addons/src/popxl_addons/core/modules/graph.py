"""Graphs with named arguments, and graphs bound to tensors."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

import popxl
from popxl import ops
from popxl.transforms import GradGraphInfo
from popxl_addons.core.modules.autodiff_patterns import autodiff_with_patterns
from popxl_addons.core.modules.building import Aux
from popxl_addons.core.modules.graph_common import CalledGraphsGradInfoLike, normalise_called_graphs_grad_info
from popxl_addons.core.modules.named_tensors import NamedTensors

__all__ = ["BoundGraph", "GraphWithNamedArgs", "GradGraphBuilder"]


class BoundGraph:
    """A graph with some inputs already connected to tensors of the calling graph."""

    def __init__(self, graph: popxl.Graph, args: Mapping[popxl.Tensor, popxl.Tensor] | None = None) -> None:
        self.graph = graph
        self.args: dict[popxl.Tensor, popxl.Tensor] = dict(args or {})

    def call(self, *targs: Any, args: Mapping[popxl.Tensor, Any] | None = None) -> tuple[popxl.Tensor, ...]:
        """Call the graph; `args` adds to or overrides the bound inputs."""
        return self.call_with_info(*targs, args=args).outputs

    def call_with_info(self, *targs: Any, args: Mapping[popxl.Tensor, Any] | None = None) -> ops.CallSiteInfo:
        """Call the graph and return the call site's info."""
        return ops.call_with_info(self.graph, *targs, inputs_dict={**self.args, **(args or {})})

    def bind(self, args: Mapping[popxl.Tensor, popxl.Tensor]) -> BoundGraph:
        """A new BoundGraph with `args` added to the bindings."""
        return BoundGraph(self.graph, {**self.args, **args})


class GradGraphBuilder(Protocol):
    """What made a graph, when it can write the graph's gradient itself: a Module that implements `build_grad`."""

    @property
    def implements_grad_graph(self) -> bool:
        """Whether it writes gradient graphs (else popxl's autodiff does)."""
        ...

    def create_grad_graph(
        self,
        fwd_graph: GraphWithNamedArgs,
        grads_provided: Iterable[popxl.Tensor] | None = None,
        grads_required: Iterable[popxl.Tensor] | None = None,
    ) -> GraphWithNamedArgs:
        """The gradient graph of `fwd_graph`."""
        ...


class GraphWithNamedArgs:
    """A graph plus names for some of its inputs (usually its variables).

    A graph made by a Module knows it (`from_module`), with the module's aux
    tensors and the gradient graphs of the graphs it calls, so that `autodiff`
    can use the module's own `build_grad`.
    """

    def __init__(
        self,
        graph: popxl.Graph,
        args: NamedTensors | None = None,
        grad_graph_info: GradGraphInfo | None = None,
        from_module: GradGraphBuilder | None = None,
        aux: Aux | None = None,
        called_graphs_grad_info: CalledGraphsGradInfoLike | None = None,
    ) -> None:
        self.graph = graph
        self.args = args if args is not None else NamedTensors()
        self._grad_graph_info = grad_graph_info
        self.from_module = from_module
        # The forward tensors the creating module kept for its `build_grad`.
        self.aux = aux if aux is not None else Aux()
        self.called_graphs_grad_info: dict[popxl.Graph, GradGraphInfo] = normalise_called_graphs_grad_info(
            called_graphs_grad_info
        )
        self.autodiff_applied = False

    @classmethod
    def from_grad_graph(cls, grad_graph_info: GradGraphInfo, args: NamedTensors | None = None) -> GraphWithNamedArgs:
        """The gradient graph of `grad_graph_info`, with its info."""
        return cls(grad_graph_info.graph, args, grad_graph_info)

    @property
    def grad_graph_info(self) -> GradGraphInfo:
        """The autodiff info of a gradient graph (AttributeError if this is not one)."""
        if self._grad_graph_info is None:
            raise AttributeError(f"Graph {self.graph.id!r} has no grad_graph_info")
        return self._grad_graph_info

    @grad_graph_info.setter
    def grad_graph_info(self, info: GradGraphInfo) -> None:
        self._grad_graph_info = info

    def bind(self, args: NamedTensors | None = None) -> BoundGraph:
        """Bind the named inputs to the tensors of `args` with the same names."""
        return BoundGraph(self.graph, self.args.to_mapping(args) if args is not None else {})

    def call(self, *targs: Any, args: Mapping[popxl.Tensor, Any] | None = None) -> tuple[popxl.Tensor, ...]:
        """Call the graph with nothing bound."""
        return BoundGraph(self.graph).call(*targs, args=args)

    def call_with_info(self, *targs: Any, args: Mapping[popxl.Tensor, Any] | None = None) -> ops.CallSiteInfo:
        """Call the graph with nothing bound and return the call site's info."""
        return BoundGraph(self.graph).call_with_info(*targs, args=args)

    def autodiff(
        self,
        grads_provided: Iterable[popxl.Tensor] | None = None,
        grads_required: Iterable[popxl.Tensor] | None = None,
        called_graphs_grad_info: CalledGraphsGradInfoLike | None = None,
        method: str = "auto",
        force: bool = False,
    ) -> GraphWithNamedArgs:
        """The gradient graph of this graph: the creating module's `build_grad` when it has one ("auto",
        "build_grad"), else popxl's autodiff ("autodiff").

        Autodiff adds outputs to this graph, so a second application is refused
        unless `force` is set. popxl's autodiff uses the gradient graphs this graph knows for the graphs it
        calls, with `called_graphs_grad_info` taking precedence; `build_grad` needs none, as in popxl-addons.
        """
        if method not in ("auto", "build_grad", "autodiff"):
            raise ValueError(f"`method` should be one of 'auto', 'build_grad' or 'autodiff'. Not: {method!r}")
        if self.autodiff_applied and not force:
            raise RuntimeError(
                f"Autodiff has already been applied to {self.graph.id!r}, which changed it in place; "
                "pass force=True to apply it again"
            )
        builder = self.from_module if self.from_module is not None and self.from_module.implements_grad_graph else None
        if method == "build_grad" and builder is None:
            raise ValueError(
                f"method='build_grad' needs `build_grad` implemented and `from_module` is specified when the graph "
                f"is made by a Module; {self.graph.id!r} has no such module"
            )
        if method != "autodiff" and builder is not None:
            grad = builder.create_grad_graph(self, grads_provided, grads_required)
        else:
            known = {**self.called_graphs_grad_info, **normalise_called_graphs_grad_info(called_graphs_grad_info)}
            grad = GraphWithNamedArgs.from_grad_graph(
                autodiff_with_patterns(self.graph, grads_provided, grads_required, known)
            )
        self.autodiff_applied = True
        return grad

    def print_schedule(self) -> str:
        """The graph's schedule as text (returned, as popxl-addons does, not printed): its inputs, named where
        they are named args, its outputs, and each op in the order it runs as
        `<kind>.<position>[(<graph it runs>)] (<inputs>) -> (<outputs>)`, tensors as `%<n> [<shape> <dtype>]`
        with `n` numbering the tensors in the order they appear."""
        numbers: dict[str, int] = {}

        def number(t: popxl.Tensor) -> str:
            return f"%{numbers.setdefault(t.id, len(numbers) + 1)}"

        def described(t: popxl.Tensor) -> str:
            return f"{number(t)} [{t.shape} {t.dtype.name}]"

        names, tensors = self.args.unpack()
        name_of = {id(t): name for name, t in zip(names, tensors, strict=True)}
        inputs = [f"{name_of[id(t)]}={number(t)}" if id(t) in name_of else number(t) for t in self.graph.inputs]
        lines = []
        for op in self.graph.ops:
            called = "".join(f"({sub.graph.id})" for sub in op.subgraphs)
            ins = ", ".join(described(t) for t in op.inputs)
            outs = ", ".join(described(t) for t in op.outputs)
            lines.append(f"{op.name}.{op.index}{called} ({ins}) -> ({outs})")
        outputs = ", ".join(number(t) for t in self.graph.outputs)
        body = "\n    ".join(lines)
        return f"Graph : {self.graph.name}\n  ({', '.join(inputs)}) -> ({outputs}) {{\n    {body}\n  }}"

    def copy(self) -> GraphWithNamedArgs:
        """A shallow copy with its own args tree."""
        new = GraphWithNamedArgs(
            self.graph,
            self.args.copy(),
            self._grad_graph_info,
            self.from_module,
            self.aux,
            self.called_graphs_grad_info,
        )
        new.autodiff_applied = self.autodiff_applied
        return new


def graph_per_tensor(
    name: str,
    tensors: NamedTensors,
    fn: Callable[[str, popxl.Tensor], popxl.Tensor],
    context: AbstractContextManager[Any] | None = None,
) -> tuple[GraphWithNamedArgs, list[str]]:
    """A graph with one named input per tensor of `tensors` (of its spec) and, per input, the output
    `fn(name, input)`; and the outputs' names. Use as `NamedTensors.pack(names, graph.bind(tensors).call())`.

    Its ops are not ordered among themselves; `context`, if given, is entered around them all.
    """
    graph = popxl.gir().create_empty_graph(name)
    names: list[str] = []
    args = {}
    with graph, popxl.in_sequence(False), context or nullcontext():
        for key, t in zip(*tensors.unpack()):
            value = popxl.graph_input(t.shape, t.dtype, t.name, meta_shape=t.meta_shape)
            args[key] = value
            names.append(key)
            popxl.graph_output(fn(key, value))
    return GraphWithNamedArgs(graph, NamedTensors.from_dict(args)), names
