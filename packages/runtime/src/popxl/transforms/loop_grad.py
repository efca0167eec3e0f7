"""Gradient rule of `repeat`: replay the loop to stash each iteration's carried inputs, then walk
the iterations backwards through the gradient graph of a copy of the body.

The stash is one remote buffer per carried input, with an entry per iteration,
so the gradient graph stays an ordinary popxl graph. Each backward iteration
recomputes its body once from the stashed inputs to get the body's activations.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from popxl import dtypes
from popxl.creation import constant
from popxl.grad_builder import GradBuilder
from popxl.graph import Graph, graph_input, graph_output
from popxl.op import Op
from popxl.opdefs.call import REPEAT
from popxl.ops.call import call, call_with_info, repeat
from popxl.ops.io import remote_load, remote_store
from popxl.remote_buffer import RemoteBuffer
from popxl.tensor import Tensor
from popxl.transforms.autodiff import contributes_to, grad_graph
from popxl.transforms.clone import clone_graph


def _zeros(t: Tensor) -> Tensor:
    return constant(np.zeros(t.shape, t.dtype.as_numpy()), t.dtype)


def repeat_grad(gb: GradBuilder, op: Op, out_grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    """Gradients of a repeat op's inputs from the gradients of its final carried values."""
    body: Graph = op.attrs["graph"]
    count: int = op.attrs["count"]
    carried = len(body.outputs)
    if count == 0:
        return [out_grads[i] if i < carried else None for i in range(len(op.inputs))]
    ir = body.ir
    copy = clone_graph(body, f"{body.name}_for_grad")
    provided = [o for o in copy.outputs if o.dtype.is_floating_point]
    reach = contributes_to(copy, provided)
    wanted = [t for t in copy.inputs if t.dtype.is_floating_point and t in reach]
    info = grad_graph(copy, provided, wanted, gb.called_infos, strict=False)
    # `reach` passes through calls whole; an input the body's gradient graph has no output for gets none.
    required = [copy.inputs.index(t) for t in info.outputs]
    values = [gb.fwd(t) for t in op.inputs]
    stash = [RemoteBuffer(t.shape, t.dtype, count, ir) for t in body.inputs[:carried]]

    replay = ir.create_empty_graph(f"{body.name}_stash")
    with replay:
        step = graph_input((), dtypes.int32, "step")
        ins = [graph_input(t.shape, t.dtype, t.name) for t in body.inputs]
        for buffer, value in zip(stash, ins[:carried]):
            remote_store(buffer, step, value)
        outs = call(copy, *ins)
        for t in [step + 1, *outs[:carried]]:
            graph_output(t)
    repeat(replay, count, 0, *values)

    carried_grads = [i for i in required if i < carried]
    other_grads = [i for i in required if i >= carried]
    back = ir.create_empty_graph(f"{body.name}_backward")
    with back:
        step = graph_input((), dtypes.int32, "step")
        d_carried = {i: graph_input(body.inputs[i].shape, body.inputs[i].dtype, f"d_{i}") for i in carried_grads}
        d_other = {i: graph_input(body.inputs[i].shape, body.inputs[i].dtype, f"d_{i}") for i in other_grads}
        others = [graph_input(t.shape, t.dtype, t.name) for t in body.inputs[carried:]]
        site = call_with_info(copy, *[remote_load(b, step) for b in stash], *others)
        feeds = [d_carried.get(copy.outputs.index(o), _zeros(o)) for o in provided]
        grads = dict(zip(required, call(info.graph, *feeds, inputs_dict=info.inputs_dict(site))))
        graph_output(step - 1)
        for i in carried_grads:
            graph_output(grads[i])
        for i in other_grads:
            graph_output(d_other[i] + grads[i])
    start = [out_grads[i] if out_grads[i] is not None else _zeros(op.outputs[i]) for i in carried_grads]
    totals = repeat(back, count, count - 1, *start, *[_zeros(op.inputs[i]) for i in other_grads], *values[carried:])[1:]
    result: list[Tensor | None] = [None] * len(op.inputs)
    for i, g in zip([*carried_grads, *other_grads], totals):
        result[i] = g
    return result


REPEAT.define_grad(repeat_grad)
