"""popxl-addons' autodiff wrappers: named gradient graphs and in-place gradient accumulation."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from functools import partial

import numpy as np

import popxl
from popxl import ops
from popxl_addons.core.modules.autodiff_patterns import autodiff_with_patterns
from popxl_addons.core.modules.graph import GraphWithNamedArgs
from popxl_addons.core.modules.graph_common import CalledGraphsGradInfoLike, normalise_called_graphs_grad_info
from popxl_addons.core.modules.named_replica_grouping import NamedReplicaGrouping
from popxl_addons.core.modules.named_tensors import NamedTensors
from popxl_addons.core.modules.variable_factory import NamedVariableFactories, VariableFactory

__all__ = ["autodiff", "autodiff_with_accumulation"]


def autodiff(
    graph: GraphWithNamedArgs | popxl.Graph,
    grads_provided: Iterable[popxl.Tensor] | None = None,
    grads_required: Iterable[popxl.Tensor] | None = None,
    called_graphs_grad_info: CalledGraphsGradInfoLike | None = None,
) -> GraphWithNamedArgs:
    """The gradient graph of `graph` by popxl's autodiff, with the op-to-identity rewrite applied to every
    gradient graph; the gradient graphs `graph` knows for the graphs it calls are used, with those given."""
    graph = graph if isinstance(graph, GraphWithNamedArgs) else GraphWithNamedArgs(graph)
    known = {**graph.called_graphs_grad_info, **normalise_called_graphs_grad_info(called_graphs_grad_info)}
    return GraphWithNamedArgs.from_grad_graph(
        autodiff_with_patterns(graph.graph, grads_provided, grads_required, known)
    )


def _arg_name(graph: GraphWithNamedArgs, t: popxl.Tensor) -> str:
    for name, arg in graph.args.named_tensors.items():
        if arg is t:
            return name
    return re.sub(r"\W", "_", t.name)


def autodiff_with_accumulation(
    graph: GraphWithNamedArgs,
    tensors_to_accumulate_grads: Iterable[popxl.Tensor],
    grads_provided: Iterable[popxl.Tensor] | None = None,
    grads_required: Iterable[popxl.Tensor] | None = None,
    called_graphs_grad_info: CalledGraphsGradInfoLike | None = None,
    replica_groupings: NamedReplicaGrouping | Mapping[str, popxl.ReplicaGrouping] | None = None,
) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
    """A gradient graph that keeps a running mean of the gradients of `tensors_to_accumulate_grads`.

    The accumulators (`accum.<name>`) and their step counter (`mean_accum_counter`)
    are by-reference inputs appended after the autodiff inputs, and their factories
    create by-reference inputs too, so a module that adds them with
    `add_variable_inputs` updates the variables it is bound to. `replica_groupings`
    gives each accumulator the grouping under its dotted name (all replicas where
    none is given). The graph outputs only the gradients of `grads_required`.
    """
    accumulated = list(tensors_to_accumulate_grads)
    required = list(grads_required or [])
    dgraph = autodiff(graph, grads_provided, required + accumulated, called_graphs_grad_info)
    groupings = _groupings_by_name(replica_groupings)
    factories = NamedVariableFactories()
    named = NamedTensors()
    g = dgraph.graph
    grads = g.outputs[len(required) :]
    with g, popxl.in_sequence(False):
        counter_f = VariableFactory(partial(np.zeros, (), np.float32), popxl.float32, "mean_accum_counter", by_ref=True)
        counter = counter_f.create_input()
        factories.insert("mean_accum_counter", counter_f)
        named.insert("mean_accum_counter", counter)
        for t, grad in zip(accumulated, grads):
            name = _arg_name(graph, t)
            accum_f = _accumulator_factory(t, f"accum.{name}", groupings.get(name))
            accum = accum_f.create_input()
            # Each name is new: merging into the `accum` subtree is all `overwrite` does here.
            factories.insert(f"accum.{name}", accum_f, overwrite=True)
            named.insert(f"accum.{name}", accum, overwrite=True)
            ops.var_updates.accumulate_mean_(accum, grad, counter)
        ops.var_updates.accumulate_(counter, popxl.constant(1.0, popxl.float32))
    g.keep_outputs(len(required))
    return factories, GraphWithNamedArgs(g, named, dgraph.grad_graph_info)


def _groupings_by_name(
    groupings: NamedReplicaGrouping | Mapping[str, popxl.ReplicaGrouping] | None,
) -> dict[str, popxl.ReplicaGrouping]:
    """Replica groupings under the dotted names of the leaves (a module's nested variables included)."""
    if groupings is None:
        return {}
    if isinstance(groupings, NamedReplicaGrouping):
        return groupings.to_dict()
    return dict(groupings)


def _accumulator_factory(t: popxl.Tensor, name: str, grouping: popxl.ReplicaGrouping | None) -> VariableFactory:
    """A by-reference factory of zeros shaped like `t` (replica-sharded like `t` where it is)."""
    if t.meta_shape:
        shard_over = math.prod(t.meta_shape) // math.prod(t.shape)
        zeros = partial(np.zeros, t.meta_shape, t.dtype.as_numpy())
        return VariableFactory(zeros, t.dtype, name, by_ref=True, replica_grouping=grouping, shard_over=shard_over)
    zeros = partial(np.zeros, t.shape, t.dtype.as_numpy())
    return VariableFactory(zeros, t.dtype, name, by_ref=True, replica_grouping=grouping)
