"""Helpers for testing modules: count ops of a kind, run a module on host data and get its outputs."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

import popxl
from popxl.extension import REGISTRY, Op, OpDef
from popxl_addons.core.modules.module import Module
from popxl_addons.core.modules.named_tensors import NamedTensors
from popxl_addons.core.session.streams import host_store

__all__ = ["ops_of_type", "TensorInput", "run_module"]


def ops_of_type(ops: Iterable[Op], op_type: str | OpDef) -> int:
    """How many of `ops` are of kind `op_type`: an `OpDef`, or the name it is registered under ("matmul", "add_",
    ...; none are of a name no kind is registered under).

    popxl-addons passes a popart op class (`_ir.op.MatMulOp`); here an op's kind is its `OpDef`.
    """
    if isinstance(op_type, str):
        kind = REGISTRY.get(op_type)
    elif isinstance(op_type, OpDef):
        kind = op_type
    else:
        raise TypeError(f"ops_of_type takes an OpDef or an op kind's name, not {op_type!r}")
    return sum(1 for op in ops if op.opdef is kind)


class TensorInput:
    """Host data for a tensor argument of `run_module`: it becomes a variable of `dtype` (by default the
    popxl type of the array's dtype; 64-bit types are not supported on the device, so give one for them)."""

    def __init__(self, data: np.ndarray[Any, Any], dtype: popxl.dtype | None = None) -> None:
        self.data = data
        self.dtype = dtype


WeightsFn = Callable[[NamedTensors], Mapping[popxl.Variable, Any]]


def run_module(
    module: Module,
    *args: Any,
    weights: WeightsFn | Mapping[popxl.Variable, Any] | None = None,
    **kwargs: Any,
) -> list[np.ndarray[Any, Any]]:
    """Build `module` in a new Ir, call it once and return its outputs as NumPy arrays.

    `args` and `kwargs` go to the module's graph; each `TensorInput` among them becomes a variable holding
    its data first. The module's variables are initialised by their factories; `weights` (a mapping from
    variables to data, or a function of the module's variables returning one) overrides some of them before
    the run. The run uses the CPU.
    """

    def as_arg(a: Any) -> Any:
        if isinstance(a, TensorInput):
            dtype = a.dtype if a.dtype is not None else popxl.dtype.as_dtype(np.asarray(a.data).dtype)
            return popxl.variable(a.data, dtype=dtype)
        return a

    ir = popxl.Ir()
    with ir.main_graph:
        new_args = [as_arg(a) for a in args]
        new_kwargs = {k: as_arg(v) for k, v in kwargs.items()}
        factories, graph = module.create_graph(*new_args, **new_kwargs)
        variables = factories.init()
        tensor_args = [a for a in new_args if isinstance(a, popxl.Tensor)]
        # Keyword tensors are graph inputs in the order of `build`'s parameters, after the positional ones.
        build = getattr(module, "build", None)
        order = list(inspect.signature(build).parameters) if build is not None else []
        keyed = sorted((k for k, a in new_kwargs.items() if isinstance(a, popxl.Tensor)), key=order.index)
        outputs = graph.bind(variables).call(*tensor_args, *(new_kwargs[k] for k in keyed))
        streams = [host_store(o) for o in outputs]

    with popxl.Session(ir, "cpu") as session:
        if weights is not None:
            data = weights(variables) if callable(weights) else weights
            session.write_variables_data(dict(data))
        results = session.run()
    return [np.asarray(results[s]) for s in streams]
