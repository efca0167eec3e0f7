"""Reusing the graph of a function or module when it is asked for again with compatible arguments.

As popxl-addons' `popxl_addons.graph_cache`: a graph is identified by the function
(its hash: a module class may define `__hash__` from its config), where its ops go
(the IPU and tile set), and its arguments, tensors by spec (shape, dtype, meta
shape), graphs by identity, containers element-wise and other values by hash.
Here the cache is keyed by those parts themselves, not by their combined hash,
so that two signatures share a graph only if each part hashes equal; an argument
that cannot be hashed stands for itself (popxl-addons raises TypeError for it).
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable
from typing import Any

import popxl
from popxl import ops
from popxl_addons.core.modules.graph import BoundGraph, GraphWithNamedArgs

__all__ = ["GraphCache", "bound_arguments", "tensor_hash", "argument_hash", "get_function_hash", "function"]


def bound_arguments(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The arguments of calling `fn(*args, **kwargs)` by parameter name, defaults included; a method's (or a
    callable object's) `self` first. Calling a popxl Module calls its `build`, whose parameters these are."""
    target: Any = fn
    if isinstance(fn, popxl.Module):
        target = fn.build
    elif not (inspect.isfunction(fn) or inspect.ismethod(fn) or inspect.isclass(fn)):
        target = type(fn).__call__.__get__(fn)
    if inspect.ismethod(target):
        args = (target.__self__, *args)
        target = target.__func__
    bound = inspect.signature(target).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _tensor_key(t: popxl.Tensor | popxl.TensorSpec) -> tuple[Any, ...]:
    return (tuple(t.shape), t.dtype.name, tuple(t.meta_shape))


def tensor_hash(t: popxl.Tensor | popxl.TensorSpec) -> int:
    """The hash of a tensor's spec: shape, dtype and meta shape."""
    return hash(_tensor_key(t))


def _argument_key(arg: Any) -> Any:
    if isinstance(arg, popxl.Tensor | popxl.TensorSpec):
        return ("tensor", _tensor_key(arg))
    if isinstance(arg, BoundGraph):
        return ("bound", id(arg.graph), _argument_key(arg.args))
    if isinstance(arg, GraphWithNamedArgs | popxl.Graph):
        graph = arg.graph if isinstance(arg, GraphWithNamedArgs) else arg
        return ("graph", id(graph))
    if isinstance(arg, dict):
        # Keys as they are (BoundGraph's are the graph's own input tensors), values by argument.
        return ("dict", tuple((k, _argument_key(v)) for k, v in arg.items()))
    if isinstance(arg, list | tuple):
        return (type(arg).__name__, tuple(_argument_key(v) for v in arg))
    try:
        # Its hash, not the value: as in popxl-addons, a module of equal hash (its config) shares the graph.
        return ("hash", hash(arg))
    except TypeError:
        return ("object", id(arg))


def argument_hash(arg: Any) -> int:
    """The hash of an argument as it decides a graph: a tensor's spec, a graph's identity (a BoundGraph's with
    its bound inputs), containers element-wise, anything else its own hash."""
    return hash(_argument_key(arg))


def _function_key(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    placement = popxl.context.current_placement(popxl.gcg())
    arguments = tuple((name, _argument_key(v)) for name, v in bound_arguments(fn, *args, **kwargs).items())
    return (hash(fn), placement.ipu, placement.tile_set, arguments)


def get_function_hash(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """The hash identifying the graph of `fn(*args, **kwargs)` in the current context: the function's hash,
    the current IPU and tile set, and each argument's `argument_hash`."""
    return hash(_function_key(fn, args, kwargs))


class GraphCache:
    """`create_graph(fn, *args)` builds a graph for `fn` once per Ir and per compatible arguments.

    Arguments are compatible when their tensors have the same specs and their
    other values are equal. A cached graph is shared: changing it changes it for
    every user.
    """

    def __init__(self) -> None:
        self._graphs: weakref.WeakKeyDictionary[popxl.Ir, dict[Any, popxl.Graph]] = weakref.WeakKeyDictionary()

    def create_graph(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> popxl.Graph:
        """The graph of `fn` for these arguments in the current Ir, built the first time."""
        ir = popxl.gir()
        graphs = self._graphs.setdefault(ir, {})
        key = _function_key(fn, args, kwargs)
        if key not in graphs:
            graphs[key] = ir.create_graph(fn, *args, **kwargs)
        return graphs[key]


def _tensors_of(value: Any) -> list[popxl.Tensor]:
    """The tensors a traced argument turns into graph inputs, in the order of those inputs."""
    if isinstance(value, popxl.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, popxl.Tensor)]
    if isinstance(value, dict):
        return [v for v in value.values() if isinstance(v, popxl.Tensor)]
    return []


def function(fn: Callable[..., Any]) -> Callable[..., tuple[popxl.Tensor, ...]]:
    """`fn` outlined: each call builds (or reuses, through a `GraphCache`) a graph of `fn` for its arguments
    and calls it, returning the graph's outputs. Tensor arguments feed the graph; the others only choose it
    (popxl-addons passes them to `ops.call` as well, which fails for them)."""
    cache = GraphCache()

    @functools.wraps(fn)
    def outlined(*args: Any, **kwargs: Any) -> tuple[popxl.Tensor, ...]:
        graph = cache.create_graph(fn, *args, **kwargs)
        bound = inspect.signature(fn).bind(*args, **kwargs)
        inputs = [t for value in bound.arguments.values() for t in _tensors_of(value)]
        return ops.call(graph, *inputs)

    return outlined
