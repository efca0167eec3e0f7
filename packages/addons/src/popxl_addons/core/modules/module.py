"""Module: builds a graph, records the variables it needs under nested names, and may define its own gradient.

A submodule assigned as an attribute shares its variable trees with its parent
under the attribute's name, and its `build` runs under that name scope. A module
that defines `build_grad` writes its gradient graph itself: `self.aux` holds
forward tensors the gradient needs, `self.var_grad` names the variables' gradients.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from typing import Any, Literal

import popxl
from popxl.transforms import ExpectedConnection, ExpectedConnectionType, GradGraphInfo
from popxl_addons.core.modules.building import (
    Aux,
    VarGrads,
    build_context,
    build_grad_context,
    current_build_context,
)
from popxl_addons.core.modules.graph import GraphWithNamedArgs
from popxl_addons.core.modules.graph_cache import GraphCache
from popxl_addons.core.modules.graph_common import normalise_called_graphs_grad_info
from popxl_addons.core.modules.named_tensors import NamedTensors
from popxl_addons.core.modules.variable_factory import (
    NamedVariableFactories,
    VariableFactory,
    add_replica_sharded_variable_input,
    add_variable_input,
)

__all__ = ["Module", "NameScopeMeta", "create_grad_graph_info"]

GradInliningError = Literal["error", "warning", "none"]


class NameScopeMeta(type):
    """Runs every `build` under the module's name scope (the attribute name it was assigned to)."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> Any:
        build = namespace.get("build")
        if callable(build):

            def scoped(self: Module, *args: Any, **kwargs: Any) -> Any:
                scope = self.__dict__.get("_name_scope")
                if scope is None:
                    return build(self, *args, **kwargs)
                with popxl.name_scope(scope):
                    return build(self, *args, **kwargs)

            scoped.__wrapped__ = build  # type: ignore[attr-defined]
            scoped.__doc__, scoped.__name__, scoped.__qualname__ = build.__doc__, build.__name__, build.__qualname__
            scoped.__annotations__ = getattr(build, "__annotations__", {})
            namespace["build"] = scoped
        return super().__new__(mcs, name, bases, namespace)


class Module(popxl.Module, metaclass=NameScopeMeta):
    """A popxl Module whose variables become named graph inputs, as in popxl-addons.

    `cache=True` reuses the graph of an earlier `create_graph` with compatible
    arguments. A module that implements `build_grad` must be called through
    its graph (`call_module`); calling it inline raises, warns or passes as
    `grad_inlining_error` says.
    """

    _variable_factories: NamedVariableFactories
    _named_inputs: NamedTensors

    def __init__(self, cache: bool = False, grad_inlining_error: GradInliningError = "error") -> None:
        if grad_inlining_error not in ("error", "warning", "none"):
            raise ValueError(
                f"grad_inlining_error should be one of 'error', 'warning', 'none'. Not: {grad_inlining_error}"
            )
        object.__setattr__(self, "_variable_factories", NamedVariableFactories())
        object.__setattr__(self, "_named_inputs", NamedTensors())
        self._graph_cache = GraphCache() if cache else None
        self._args_cache: dict[popxl.Graph, tuple[NamedVariableFactories, NamedTensors]] = {}
        self.aux = Aux()
        self.var_grad = VarGrads()
        self.grad_inlining_error = grad_inlining_error
        self.called_graphs_grad_info: dict[popxl.Graph, GradGraphInfo] = {}
        self._submodule_infos: list[Module] = []
        if cache and self.implements_grad_graph:
            raise ValueError("You cannot use graph caching if you have implemented `build_grad`.")

    def _require_init(self) -> None:
        if "_variable_factories" not in self.__dict__:
            raise RuntimeError(f"{type(self).__name__}.__init__ must call super().__init__()")

    def __setattr__(self, key: str, value: Any) -> None:
        if isinstance(value, Module) and not key.startswith("_"):
            self._require_init()
            value.set_name_scope(key)
            # The child's trees are shared: what it adds while building appears under `key` here.
            self._variable_factories.insert(key, value._variable_factories, overwrite=True)
            self._named_inputs.insert(key, value._named_inputs, overwrite=True)
            self._submodule_infos.append(value)
        object.__setattr__(self, key, value)

    def set_name_scope(self, name: str) -> None:
        """Build under name scope `name`."""
        object.__setattr__(self, "_name_scope", name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._require_init()
        if self.implements_grad_graph and current_build_context() is not self:
            message = (
                f"{type(self).__name__} is called inline but `build_grad` has been implemented, so autodiff would "
                "not use it: create its graph and call that (`self.call_module`), or set grad_inlining_error='none'"
            )
            if self.grad_inlining_error == "error":
                raise RuntimeError(message)
            if self.grad_inlining_error == "warning":
                warnings.warn(message, stacklevel=2)
        return self.build(*args, **kwargs)

    def build_grad(self, *args: Any) -> Any:
        """Define this module's gradient graph: inputs are the gradients of the forward outputs, in order;
        outputs the gradients of the forward inputs that are not variables, in order."""
        raise NotImplementedError(f"{type(self).__name__} must implement `build_grad` to create a gradient graph")

    @property
    def implements_grad_graph(self) -> bool:
        """Whether this module defines its own `build_grad`."""
        return type(self).build_grad is not Module.build_grad

    def _reset(self) -> None:
        """Forget the state of the last build (the trees are emptied in place: parents share them)."""
        self._variable_factories.clear()
        self._named_inputs.clear()
        self.called_graphs_grad_info = {}
        self.aux = Aux()
        self.var_grad = VarGrads()

    def consolidated_called_graphs_grad_info(self) -> dict[popxl.Graph, GradGraphInfo]:
        """The gradient graphs known for the graphs this module and its sub-modules call (this module's own
        first, then the later-assigned sub-modules'), as popxl-addons consolidates them for `create_graph`."""
        infos: dict[popxl.Graph, GradGraphInfo] = {}
        for sub in self._submodule_infos:
            infos.update(sub.consolidated_called_graphs_grad_info())
        # Users may have put popxl-addons' graph-likes in it (a GraphWithNamedArgs for a graph).
        infos.update(normalise_called_graphs_grad_info(self.called_graphs_grad_info))
        return infos

    def create_graph(self, *args: Any, **kwargs: Any) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
        """Trace `build` into a new subgraph (or reuse a cached one); its variable factories and the graph."""
        self._require_init()
        if self._graph_cache is not None:
            with build_context(self):
                graph = self._graph_cache.create_graph(self, *args, **kwargs)
            if graph not in self._args_cache:
                self._args_cache[graph] = (self._variable_factories.copy(), self._named_inputs.copy())
            factories, named = self._args_cache[graph]
        else:
            self.aux = Aux()
            with build_context(self):
                graph = popxl.gir().create_graph(self, *args, **kwargs)
            if self.implements_grad_graph:
                graph.recursive_autodiff = False
            factories, named = self._variable_factories, self._named_inputs
        result = GraphWithNamedArgs(
            graph,
            named.copy(),
            from_module=self,
            aux=self.aux.copy(),
            called_graphs_grad_info=self.consolidated_called_graphs_grad_info(),
        )
        factories = factories.copy()
        self._reset()
        return factories, result

    def create_grad_graph(
        self,
        fwd_graph: GraphWithNamedArgs,
        grads_provided: Iterable[popxl.Tensor] | None = None,
        grads_required: Iterable[popxl.Tensor] | None = None,
    ) -> GraphWithNamedArgs:
        """The gradient graph this module's `build_grad` writes for `fwd_graph`.

        The aux tensors `build_grad` reads become outputs of `fwd_graph` (so this
        changes `fwd_graph`, once); the variables' gradients set in `var_grad`
        follow the non-variable input gradients among the gradient graph's outputs.
        """
        if not self.implements_grad_graph:
            raise NotImplementedError(f"{type(self).__name__} does not implement `build_grad`")
        provided, plain, variables = self._grad_signature(fwd_graph, grads_provided, grads_required)
        self.var_grad = VarGrads(fwd_graph.args.to_dict())
        self.aux = fwd_graph.aux.copy()
        with build_grad_context(self):
            grad_graph = popxl.gir().create_graph(self.build_grad, *[t.spec for t in provided])
        self._check_grad_graph(grad_graph, plain, variables)
        with grad_graph:
            for name in variables:
                popxl.graph_output(self.var_grad.gradients[name])
        grad_to_fwd = self.aux.grad_to_fwd
        # Every aux tensor the gradient reads becomes a forward output, inputs too (popxl-addons' stitching).
        for fwd_t in grad_to_fwd.values():
            fwd_graph.graph.add_output(fwd_t)
        info = create_grad_graph_info(
            grad_graph.ir,
            fwd_graph.graph,
            grad_graph,
            {**dict(zip(grad_graph.inputs, provided)), **grad_to_fwd},
            dict(zip(grad_graph.outputs, [*plain, *variables.values()])),
            set(grad_to_fwd.values()),
        )
        self._reset()
        return GraphWithNamedArgs.from_grad_graph(info)

    def _grad_signature(
        self,
        fwd: GraphWithNamedArgs,
        grads_provided: Iterable[popxl.Tensor] | None,
        grads_required: Iterable[popxl.Tensor] | None,
    ) -> tuple[list[popxl.Tensor], list[popxl.Tensor], dict[str, popxl.Tensor]]:
        for name, param in inspect.signature(self.build_grad).parameters.items():
            if param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
                raise TypeError(
                    "The `build_grad` method signature must only have a fixed number of positional parameters "
                    f"as inputs. Not a positional parameter: {name}"
                )
        provided = _checked(grads_provided, fwd.graph.outputs, "grads_provided", "output")
        required = _checked(grads_required, fwd.graph.inputs, "grads_required", "input")
        names = {id(t): n for n, t in fwd.args.to_dict().items()}
        variables = {names[id(t)]: t for t in required if id(t) in names}
        plain = [t for t in required if id(t) not in names]
        return provided, plain, variables

    def _check_grad_graph(
        self, grad_graph: popxl.Graph, plain: Sequence[popxl.Tensor], variables: dict[str, popxl.Tensor]
    ) -> None:
        missing = [n for n in variables if n not in self.var_grad]
        if missing:
            raise RuntimeError(
                "Not all variable gradients have been specified in self.var_grad. If you don't want every "
                f"gradient, give `grads_required`. Variables missing gradients: {missing}"
            )
        outputs = grad_graph.outputs
        if len(outputs) > len(plain):
            raise RuntimeError(
                f"Too many outputs in the grad graph: build_grad returned {len(outputs)} gradients, but "
                f"`grads_required` has {len(plain)} inputs that are not variables"
            )
        if len(outputs) < len(plain):
            raise RuntimeError(
                "Not all forward graph inputs have been specified as outputs in the grad graph: build_grad returned "
                f"{len(outputs)} gradients for {len(plain)} required inputs that are not variables"
            )
        for i, (out, want) in enumerate(zip(outputs, plain)):
            if (out.shape, out.meta_shape) != (want.shape, want.meta_shape):
                raise ValueError(
                    f"Shape or meta-shape of output Tensor at position {i} does not match the `grad_required` at "
                    f"position {i}: {out.shape} (meta shape {out.meta_shape}) against {want.shape} "
                    f"(meta shape {want.meta_shape})"
                )

    def add_variable_factory(self, variable_f: VariableFactory, name: str | None = None) -> popxl.Tensor:
        """A graph input from an existing variable factory, under `name` (the factory's name by default)."""
        key = name or variable_f.name
        if key is None:
            raise ValueError("add_variable_factory needs a name: the factory has none")
        t = variable_f.create_input()
        self._variable_factories.insert(key, variable_f)
        self._named_inputs.insert(key, t)
        return t

    def add_variable_input(
        self,
        name: str,
        data_iter: Callable[[], Any] | Iterable[Any],
        dtype: Any | None = None,
        by_ref: bool = False,
        replica_grouping: popxl.ReplicaGrouping | None = None,
        overwrite: bool = False,
    ) -> popxl.Tensor:
        """A new graph input named `name`, with a factory for its variable (merged into a subtree with `overwrite`)."""
        self._require_init()
        t, factory = add_variable_input(name, data_iter, dtype, by_ref, replica_grouping)
        self._variable_factories.insert(name, factory, overwrite)
        self._named_inputs.insert(name, t, overwrite)
        return t

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
        self._require_init()
        t, factory = add_replica_sharded_variable_input(name, data_iter, dtype, by_ref, replica_grouping, shard_over)
        self._variable_factories.insert(name, factory)
        self._named_inputs.insert(name, t)
        return t

    def add_variable_inputs(
        self, name: str | int, variable_f: NamedVariableFactories, overwrite: bool = False
    ) -> NamedTensors:
        """Graph inputs for every factory of `variable_f`, under `name`: to bind another module's graph."""
        if isinstance(name, int):
            if name < 0:
                raise ValueError(f"Name of int type must be positive. Value: {name}")
            name = str(name)
        tensors = NamedTensors.from_dict({k: f.create_input() for k, f in variable_f.to_dict().items()})
        self._variable_factories.insert(name, variable_f.copy(), overwrite)
        self._named_inputs.insert(name, tensors, overwrite)
        return tensors

    @classmethod
    def from_list(cls, sub_modules: Sequence[Module]) -> Module:
        """A module holding `sub_modules` under "0", "1", ... (iterable, and indexable by number)."""
        module = cls()
        for i, sub in enumerate(sub_modules):
            setattr(module, str(i), sub)
        object.__setattr__(module, "_sub_modules", list(sub_modules))
        return module

    @classmethod
    def from_variable_factories(cls, inputs: Sequence[VariableFactory]) -> Module:
        """A module whose attributes "0", "1", ... are graph inputs for the given factories (inside a build)."""
        module = cls()
        for i, factory in enumerate(inputs):
            object.__setattr__(module, str(i), module.add_variable_factory(factory, name=str(i)))
        return module

    def get(self, key: str | int) -> Any:
        """The attribute `key` (numbers name list members)."""
        return getattr(self, str(key))

    def __getitem__(self, key: str | int) -> Any:
        return self.get(key)

    def __iter__(self) -> Iterator[Any]:
        try:
            return iter(self.__dict__["_sub_modules"])
        except KeyError:
            raise TypeError(f"{type(self).__name__} is iterable only when made by Module.from_list") from None

    def call_module(
        self,
        module: Module,
        name: str | None = None,
        autodiff: Literal["auto", "build_grad", "autodiff", "none"] = "auto",
        grads_provided: Callable[[GraphWithNamedArgs], Iterable[popxl.Tensor]] | None = None,
        grads_required: Callable[[GraphWithNamedArgs], Iterable[popxl.Tensor]] | None = None,
    ) -> Callable[..., tuple[popxl.Tensor, ...]]:
        """`module` outlined: calling the result creates its graph (and, for `autodiff`, its gradient graph, which
        autodiff of this module then uses), adds its variables under `name`, and calls the graph."""

        def call(*args: Any, **kwargs: Any) -> tuple[popxl.Tensor, ...]:
            factories, graph = module.create_graph(*args, **kwargs)
            variables = self.add_variable_inputs(name or type(module).__name__, factories)
            self.called_graphs_grad_info.update(graph.called_graphs_grad_info)
            outputs_before = len(graph.graph.outputs)
            if autodiff != "none" and (autodiff != "auto" or module.implements_grad_graph):
                provided = grads_provided(graph) if grads_provided is not None else None
                required = grads_required(graph) if grads_required is not None else None
                grad = graph.autodiff(method=autodiff, grads_provided=provided, grads_required=required)
                self.called_graphs_grad_info[graph.graph] = grad.grad_graph_info
            return graph.bind(variables).call(*args, **kwargs)[:outputs_before]

        return call


def _checked(
    given: Iterable[popxl.Tensor] | None, allowed: Sequence[popxl.Tensor], what: str, kind: str
) -> list[popxl.Tensor]:
    if given is None:
        return list(allowed)
    tensors = list(given)
    for t in tensors:
        if not isinstance(t, popxl.Tensor) or t not in allowed:
            raise ValueError(f"A Tensor specified in `{what}` is not a {kind} of `fwd_graph` or not a Tensor: {t}")
    repeated = [t for i, t in enumerate(tensors) if any(t is u for u in tensors[:i])]
    if repeated:
        raise ValueError(f"A Tensor has been specified more than once in `{what}`. Duplicates: {repeated}")
    return tensors


def create_grad_graph_info(
    ir: popxl.Ir,
    fwd_graph: popxl.Graph,
    grad_graph: popxl.Graph,
    grad_input_to_fwd_output: Mapping[popxl.Tensor, popxl.Tensor],
    grad_output_to_fwd_input: Mapping[popxl.Tensor, popxl.Tensor],
    fwd_tensors: Set[popxl.Tensor],
) -> GradGraphInfo:
    """The info of a gradient graph written by hand, as popxl-addons builds it: `grad_input_to_fwd_output` maps
    the gradient graph's first inputs, in order, to the forward tensors they connect to (their value where the
    tensor is in `fwd_tensors`, the aux tensors, else their gradient); `grad_output_to_fwd_input` maps its
    outputs, in order, to the forward tensors whose gradients they are. Both graphs are of `ir`."""
    for g in (fwd_graph, grad_graph):
        if g.ir is not ir:
            raise ValueError(f"create_grad_graph_info: graph {g.id!r} is not of the given Ir")
    for what, keys, tensors, kind in [
        ("grad_input_to_fwd_output", list(grad_input_to_fwd_output), grad_graph.inputs, "inputs"),
        ("grad_output_to_fwd_input", list(grad_output_to_fwd_input), grad_graph.outputs, "outputs"),
    ]:
        if len(keys) > len(tensors) or any(a is not b for a, b in zip(keys, tensors)):
            raise ValueError(
                f"create_grad_graph_info: the keys of `{what}` must be the first {kind} of {grad_graph.id!r} in "
                f"order; got {[t.id for t in keys]}"
            )
    expected_inputs = [
        ExpectedConnection.create(
            fwd, ExpectedConnectionType.Fwd if fwd in fwd_tensors else ExpectedConnectionType.FwdGrad
        )
        for fwd in grad_input_to_fwd_output.values()
    ]
    expected_outputs = [
        ExpectedConnection.create(fwd, ExpectedConnectionType.FwdGrad) for fwd in grad_output_to_fwd_input.values()
    ]
    return GradGraphInfo.create(grad_graph, fwd_graph, expected_inputs, expected_outputs)
