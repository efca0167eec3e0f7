"""Reusing the graph of a function or module when it is asked for again with compatible arguments."""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any

import popxl


def _argument_key(arg: Any) -> Any:
    """What of an argument decides the graph: a tensor's spec, a graph's identity, containers element-wise."""
    if isinstance(arg, popxl.Tensor | popxl.TensorSpec):
        return ("tensor", tuple(arg.shape), arg.dtype.name, tuple(arg.meta_shape))
    if isinstance(arg, popxl.Graph):
        return ("graph", id(arg))
    graph = getattr(arg, "graph", None)
    if isinstance(graph, popxl.Graph):
        bound = getattr(arg, "args", None)
        return ("bound", id(graph), _argument_key(dict(bound)) if isinstance(bound, dict) else None)
    if isinstance(arg, dict):
        return ("dict", tuple((k, _argument_key(v)) for k, v in arg.items()))
    if isinstance(arg, list | tuple):
        return (type(arg).__name__, tuple(_argument_key(v) for v in arg))
    try:
        hash(arg)
    except TypeError:
        return ("object", id(arg))
    return arg


def _signature_key(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    target = getattr(fn, "build", None)
    if target is None or inspect.isfunction(fn) or inspect.ismethod(fn):
        target = fn
    bound = inspect.signature(target).bind(*args, **kwargs)
    bound.apply_defaults()
    # Where the ops go (the IPU and tile set) is part of a graph too.
    placement = popxl.context.current_placement(popxl.gcg())
    arguments = tuple((name, _argument_key(v)) for name, v in bound.arguments.items())
    # As popxl-addons: equal hashes mean the same function (a module class may define __hash__ from its config).
    return (hash(fn), placement.ipu, placement.tile_set, arguments)


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
        key = _signature_key(fn, args, kwargs)
        if key not in graphs:
            graphs[key] = ir.create_graph(fn, *args, **kwargs)
        return graphs[key]
