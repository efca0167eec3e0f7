"""popxl-addons' pipelining transform: `pipelined_execution`, its stage contexts and activation stashes.

In popxl-addons the ops created in `pipelined_execution(steps)` are annotated with a pipeline stage
(`with p.stage(i), popxl.ipu(i): ...`), moved into one graph per stage, and run as a pipeline: ramp-up
cycles, a loop of main cycles in which stage s works on micro-batch c - s in cycle c, and ramp-down
cycles, with the `ipu_copy` ops between stages run at the end of each cycle and `Stash`/`Restore` ring
buffers carrying activations to later stages. Each stage runs on its own IPU.

Here every stage runs on the one device of a replica (the Session lowers a replica's program to one XLA
computation, so ops cannot be placed on other devices), so a pipeline schedule would gain nothing: the
transform runs the micro-batches one after another instead, each through stage 0, 1, ... in turn, in
one loop of `steps` iterations (one `repeat` op; the stages' ops in stage order, each stage's in the
order they were created). That is the un-pipelined program computing the same micro-batches, and it
gives popxl-addons' results for every program whose stages exchange values only through tensors
(`ipu_copy`, `stash_and_restore_tensor`): outputs, gradients accumulated over the steps, and
host loads and stores in micro-batch order. Programs whose result would depend on the pipeline's
schedule, a variable or a stream updated by one stage and used by another, are refused.

Honoured: the stages (their order and the check that every op has one), `steps`, popxl-addons'
refusal of fewer steps than twice the stages, and the stashes (real ring buffers, as in popxl-addons).
Recorded only: each op's `popxl.ipu` placement and `ipu_copy`'s source IPU (`popxl.ipu_only`).
See docs/pipelining.md.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial

import numpy as np

import popxl
from popxl import context, ipu_only, ops
from popxl.extension import Op
from popxl.ops.call import CallSiteInfo
from popxl.transforms.autodiff import GradGraphInfo
from popxl_addons.core.modules.module import Module

__all__ = ["pipelined_execution", "StageContext", "Stash", "Restore", "get_op_pipeline_stage"]

# The resources whose order of use across micro-batches is part of a program's result.
_ORDERED_RESOURCES = (popxl.HostToDeviceStream, popxl.DeviceToHostStream, popxl.RemoteBuffer)


def get_op_pipeline_stage(op: Op, op_dict: Mapping[int, Sequence[Op]]) -> int | None:
    """The pipeline stage `op` was created in, from a stage -> ops mapping (None if it has none)."""
    for stage, op_list in op_dict.items():
        if any(o is op for o in op_list):
            return stage
    return None


class StageContext:
    """What `pipelined_execution` yields: `stage(i)` annotates the ops created in it with stage `i`.

    `ops` maps each stage to its ops, in creation order. Ops of the pipeline's graph are given the stage
    that was open when they were created; one created outside every stage is refused at the next stage
    boundary (popxl-addons refuses it on creation).
    """

    def __init__(self, graph: popxl.Graph) -> None:
        self.graph = graph
        self.ops: defaultdict[int, list[Op]] = defaultdict(list)
        self._stage: int | None = None
        # Holding the ops keeps their ids from being reused by new ops.
        self._seen: dict[int, Op] = {id(op): op for op in graph.ops}
        self._stage_of: dict[int, int] = {}
        # The stash buffers: written by one stage and read by a later one by design (ring buffers).
        self._stash_buffers: set[int] = set()

    def _sync(self) -> None:
        """Give the ops created in the graph since the last call the stage open now."""
        new = [op for op in self.graph.ops if id(op) not in self._seen]
        if not new:
            return
        if self._stage is None:
            raise RuntimeError(
                f"Operation must be created in a stage context: {new[0]} was created in `pipelined_execution` "
                "outside every `stage(i)`"
            )
        for op in new:
            self._seen[id(op)] = op
            self._stage_of[id(op)] = self._stage
            self.ops[self._stage].append(op)

    def stage_of(self, op: Op) -> int | None:
        """The stage `op` was created in, or None when it was created outside the pipeline."""
        self._sync()
        return self._stage_of.get(id(op))

    @contextmanager
    def stage(self, i: int) -> Iterator[None]:
        """Set the pipeline stage of the ops created in this scope to `i`."""
        if isinstance(i, bool) or not isinstance(i, int | np.integer) or i < 0:
            raise ValueError(f"A pipeline stage is a non-negative int, got {i!r}")
        self._sync()
        prev = self._stage
        self._stage = int(i)
        try:
            yield
        except BaseException:
            self._stage = prev
            raise
        self._sync()
        self._stage = prev

    def _is_external_input(self, t: popxl.Tensor) -> bool:
        return t.producer is None or self.stage_of(t.producer) is None

    def stash_and_restore_tensor(self, t: popxl.Tensor, from_stage: int | None = None) -> popxl.Tensor:
        """`t`, of stage `from_stage` (its producer's by default), restored in the current stage through
        a stash of `to_stage - from_stage + 1` micro-batches."""
        if from_stage is None:
            if t.producer is None:
                raise RuntimeError(
                    f"If the tensor to be stashed ({t.id}) does not have a producer `from_stage` must be specified "
                    "to `stash_and_restore_tensor`"
                )
            from_stage = self.stage_of(t.producer)
            if from_stage is None:
                raise ValueError(
                    f"{t.id} is made outside the pipeline's stages: give `from_stage` to `stash_and_restore_tensor`"
                )
        to_stage = self._stage
        if to_stage is None:
            raise RuntimeError("`stash_and_restore_tensor` must be called in a stage context.")
        if from_stage >= to_stage:
            raise ValueError(
                f"stash_and_restore_tensor carries {t.id} from stage {from_stage} to a later stage, "
                f"not to stage {to_stage}"
            )
        with self.stage(from_stage):
            stash_factories, stash_graph = Stash().create_graph(t, to_stage - from_stage + 1)
            stash_args = stash_factories.init()
            stash_graph.bind(stash_args).call(t)
        self._stash_buffers.add(id(stash_args.stash))
        with self.stage(to_stage):
            restore_factories, restore_graph = Restore().create_graph(stash_args.stash)
            (restored,) = restore_graph.bind(restore_factories.init()).call(stash_args.stash)
        return restored

    def stash_and_restore_activations(
        self, call_info: CallSiteInfo, grad_info: GradGraphInfo
    ) -> dict[popxl.Tensor, popxl.Tensor]:
        """The gradient graph's forward inputs for the forward call `call_info`, stashed and restored in the
        current stage where the call is of another stage (tensors made outside the pipeline pass as they are)."""
        activations = grad_info.inputs_dict(call_info)
        from_stage = self.stage_of(call_info.op)
        if from_stage is not None and self._stage != from_stage:
            for sg_tensor, act in activations.items():
                if not self._is_external_input(act):
                    activations[sg_tensor] = self.stash_and_restore_tensor(act, from_stage=from_stage)
        return activations


@contextmanager
def pipelined_execution(steps: int) -> Iterator[StageContext]:
    """Run the ops created in this context, each annotated with a stage by the yielded `StageContext`,
    as a pipeline over `steps` micro-batches (here: each micro-batch through the stages in turn; see the
    module's docstring)."""
    if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps < 1:
        raise ValueError(f"pipelined_execution takes a positive number of steps, got {steps!r}")
    graph = popxl.gcg()
    stages = StageContext(graph)
    yield stages
    stages._sync()
    _run_stages(stages, int(steps))


def _run_stages(stages: StageContext, steps: int) -> None:
    """Move the stages' ops into one graph, in stage order, and run it `steps` times in their place."""
    num_stages = len([s for s, op_list in stages.ops.items() if op_list])
    if num_stages == 0:
        return
    if steps < 2 * num_stages:
        raise ValueError(
            "Pipelining requires the steps at least 2x the number of stages in the pipeline. "
            f"steps={steps} stages={num_stages}"
        )
    graph = stages.graph
    position = {id(op): i for i, op in enumerate(graph.ops)}
    stage_of = stages._stage_of
    moved = sorted(
        (op for op_list in stages.ops.values() for op in op_list), key=lambda op: (stage_of[id(op)], position[id(op)])
    )
    _check_stages(stages, moved)

    made = {id(t) for op in moved for t in op.outputs}
    modified = {id(root) for op in moved for root in _modified_roots(op, made)}
    body = graph.ir.create_empty_graph("pipeline_graph")
    old_to_new: dict[popxl.Tensor, popxl.Tensor] = {}
    feeds: dict[popxl.Tensor, popxl.Tensor] = {}  # body input -> the tensor of `graph` that feeds it
    new_index = {position[id(op)]: i for i, op in enumerate(moved)}
    with body, context.fresh_name_scopes():
        for op in moved:
            for t in op.inputs:
                if t not in old_to_new:
                    by_ref = id(t) in modified
                    new_in = popxl.graph_input(t.shape, t.dtype, t.name, by_ref=by_ref, meta_shape=t.meta_shape)
                    old_to_new[t] = new_in
                    feeds[new_in] = t
            clone = body.add_op(op.opdef, [old_to_new[t] for t in op.inputs], op.attrs, [t.name for t in op.outputs])
            after = op.placement.after
            clone.placement = dataclasses.replace(op.placement, after=None if after is None else new_index.get(after))
            ipu_only.record(clone, **ipu_only.recorded(op))
            old_to_new.update(zip(op.outputs, clone.outputs, strict=True))

    graph.remove_ops(moved)
    with graph, popxl.in_sequence("pass"), popxl.ipu(0):
        ops.repeat_with_info(body, steps, inputs_dict=feeds)


def _root(t: popxl.Tensor, made: set[int]) -> list[popxl.Tensor]:
    """The tensors from outside the pipeline whose storage `t` shares (itself, or what a view reads)."""
    op = t.producer
    if id(t) not in made or op is None:
        return [t]
    if op.opdef.aliasing.view_update is not None:
        return [r for parent in op.inputs for r in _root(parent, made)]
    for i, out in op.modifies.items():
        if out is not None and op.outputs[out] is t:
            return _root(op.inputs[i], made)
    return []


def _modified_roots(op: Op, made: set[int]) -> list[popxl.Tensor]:
    """The tensors from outside the pipeline that `op` updates in place."""
    return [r for i in op.modifies for r in _root(op.inputs[i], made)]


def _check_stages(stages: StageContext, moved: Sequence[Op]) -> None:
    """Refuse what running the micro-batches one after another cannot give popxl-addons' result for."""
    stage_of = stages._stage_of
    made = {id(t) for op in moved for t in op.outputs}
    producer_stage = {id(t): stage_of[id(op)] for op in moved for t in op.outputs}
    used: defaultdict[int, set[int]] = defaultdict(set)
    updated: defaultdict[int, set[int]] = defaultdict(set)
    names: dict[int, str] = {}
    for op in moved:
        stage = stage_of[id(op)]
        for t in op.inputs:
            if producer_stage.get(id(t), stage) > stage:
                raise ValueError(
                    f"{op} of pipeline stage {stage} reads {t.id}, made in the later stage {producer_stage[id(t)]}"
                )
            for r in _root(t, made):
                used[id(r)].add(stage)
                names[id(r)] = r.id
        for r in _modified_roots(op, made):
            updated[id(r)].add(stage)
        for res in op.reads | op.writes:
            if isinstance(res, _ORDERED_RESOURCES):
                used[id(res)].add(stage)
                names[id(res)] = repr(res)
        for res in op.writes:
            if isinstance(res, _ORDERED_RESOURCES):
                updated[id(res)].add(stage)
    for key, writers in updated.items():
        if key in stages._stash_buffers:
            continue
        if len(writers | used[key]) > 1:
            raise NotImplementedError(
                f"{names[key]} is updated in pipeline stage(s) {sorted(writers)} and used in stage(s) "
                f"{sorted(used[key])}: in a pipeline, what each stage sees of it depends on the pipeline's schedule, "
                "and this runtime runs each micro-batch through the stages in turn. Keep what a stage updates to "
                "that stage, and carry values to later stages with ipu copies or `stash_and_restore_tensor`"
            )


class Stash(Module):
    """A ring buffer of `stash_size` entries of `t`'s shape: each call writes `t` at the next entry."""

    @popxl.in_sequence()
    def build(self, t: popxl.Tensor, stash_size: int) -> None:
        """Write `t` at the counter's entry of the stash, then advance the counter."""
        if stash_size <= 1:
            raise TypeError(f"Stash must be larger than 1. size={stash_size}, t={t}")
        counter = self.add_variable_input("counter", partial(np.zeros, (1,), np.uint32), popxl.uint32, by_ref=True)
        # popxl-addons stashes a scalar as shape (1,), so restores it as (1,); here it is restored as ().
        stash = self.add_variable_input(
            "stash", partial(np.zeros, (stash_size, *t.shape), t.dtype.as_numpy()), t.dtype, by_ref=True
        )
        t = t.reshape((1, *t.shape))
        ops.dynamic_update_(stash, counter, t, axes=[0], sizes=[1], no_overlap=True)
        ops.increment_mod_(counter, 1, stash_size)


class Restore(Module):
    """Reads a `Stash`'s entries in the order they were written."""

    @popxl.in_sequence()
    def build(self, stash: popxl.TensorByRef) -> popxl.Tensor:
        """The counter's entry of `stash`; the counter then advances."""
        counter = self.add_variable_input("counter", partial(np.zeros, (1,), np.uint32), popxl.uint32, by_ref=True)
        t = ops.dynamic_slice(stash, counter, axes=[0], sizes=[1], no_overlap=True)
        ops.increment_mod_(counter, 1, stash.shape[0])
        return t.reshape(t.shape[1:])
