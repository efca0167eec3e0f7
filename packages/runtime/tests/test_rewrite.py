"""`Graph.rewrite_op`: the one way to change an op after creation, with the op kind's checks re-run."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.extension import OpDef, create_op, register, replace_with_identity
from popxl.tensor import TensorSpec

_SCALED = register(
    OpDef(
        "test_rewrite_scaled",
        lambda specs, attrs: [specs[0]],
        lambda ctx, attrs, x: [x * attrs["factor"]],
        normalise=lambda specs, attrs: _positive_factor(attrs),
    )
)
_TWO_OUT = register(
    OpDef("test_rewrite_two_out", lambda specs, attrs: [specs[0], specs[0]], lambda ctx, attrs, x: [x, x + 1])
)


def _stored(ir: popxl.Ir, stream: popxl.DeviceToHostStream) -> np.ndarray:  # type: ignore[type-arg]
    with popxl.Session(ir, "cpu") as session:
        return np.asarray(session.run({})[stream])


def _positive_factor(attrs: popxl.extension.Attrs) -> dict[str, object]:
    if attrs["factor"] <= 0:
        raise ValueError(f"factor must be positive, got {attrs['factor']}")
    return {"factor": float(attrs["factor"])}


def test_rewrite_renormalises_attrs_and_changes_the_value() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.arange(3, dtype=np.float32), name="x")
        (y,) = create_op(_SCALED, [x], {"factor": 2})
        op = y.producer
        assert op is not None
        ir.main_graph.rewrite_op(op, attrs={"factor": 5})
        assert op.attrs == {"factor": 5.0}
        out = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(out, y)
    result = _stored(ir, out)
    np.testing.assert_allclose(result, np.arange(3) * 5.0)


def test_a_refused_rewrite_changes_nothing() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 3), np.float32))
        w = popxl.variable(np.ones((3,), np.float32))
        (y,) = create_op(_SCALED, [x], {"factor": 2})
        op = y.producer
        assert op is not None
        with pytest.raises(ValueError, match="factor must be positive"):
            ir.main_graph.rewrite_op(op, attrs={"factor": -1})
        # The new kind would infer another output spec for the same output tensor.
        with pytest.raises(ValueError, match=r"would become float32 \(3,\)"):
            ir.main_graph.rewrite_op(op, inputs=[w])
        assert (op.opdef, op.inputs, op.attrs, op.outputs) == (_SCALED, (x,), {"factor": 2.0}, (y,))


def test_rewrite_refuses_strangers_and_dropped_outputs() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        a, _ = create_op(_TWO_OUT, [x])
        op = a.producer
        assert op is not None
        with pytest.raises(ValueError, match="would drop outputs"):
            ir.main_graph.rewrite_op(op, opdef=_SCALED, attrs={"factor": 1})
    sub = ir.create_empty_graph("sub")
    with sub:
        t = popxl.graph_input((2,), popxl.float32, "t")
    with pytest.raises(ValueError, match="not an op of graph"):
        sub.rewrite_op(op)
    with pytest.raises(ValueError, match="is not in the current Graph"):
        ir.main_graph.rewrite_op(op, inputs=[t])
    assert op.inputs == (x,)


def test_added_graph_output_reaches_each_call_through_a_rewrite() -> None:
    ir = popxl.Ir()
    sub = ir.create_empty_graph("sub")
    with sub:
        t = popxl.graph_input((2,), popxl.float32, "t")
        popxl.graph_output(t + 1)
    with ir.main_graph:
        x = popxl.variable(np.array([1.0, 2.0], np.float32))
        info = ops.call_with_info(sub, x)
        with sub:
            doubled = t * 2
        sub.add_output(doubled)
        assert len(info.outputs) == 2 and info.outputs[1].producer is info.op
        out = popxl.d2h_stream((2,), popxl.float32)
        ops.host_store(out, info.outputs[1])
    result = _stored(ir, out)
    np.testing.assert_allclose(result, [2.0, 4.0])


def test_a_loop_takes_only_an_added_output_it_can_carry_and_a_call_no_input_it_cannot_feed() -> None:
    ir = popxl.Ir()
    body = ir.create_empty_graph("body")
    with body:
        t = popxl.graph_input((2,), popxl.float32, "t")
        popxl.graph_output(t + 1)
    with ir.main_graph:
        x = popxl.variable(np.zeros(2, np.float32))
        (looped,) = ops.repeat(body, 3, x)
        with body:
            extra = t * 2
        with pytest.raises(ValueError, match="repeat carries output i into input i"):
            body.add_output(extra)  # a second output, with no second input to carry it into
        assert len(body.outputs) == 1 and len(looped.producer.outputs) == 1  # type: ignore[union-attr]
        with pytest.raises(ValueError, match="cannot feed a new input"):
            body.add_input_from_callers("u", TensorSpec((3,), popxl.float32), lambda site: x)


def test_a_loop_takes_an_added_output_carried_into_its_input() -> None:
    """As popxl-addons routes a tensor into a loop body and then makes the body's result an output: the loop
    op gains the output, the value carried from one iteration into the next."""
    ir = popxl.Ir()
    body = ir.create_empty_graph("body")
    with ir.main_graph:
        x = popxl.variable(np.array([1.0, -2.0], np.float32))
        loop = ops.repeat_with_info(body, 5)
        with body:
            routed = body.add_input_from_callers("x", x.spec, lambda site: x)
            wide = ops.cast(routed, popxl.float16)
        with pytest.raises(ValueError, match=r"must match the input it is carried into"):
            body.add_output(wide)
        with body:
            popxl.graph_output(routed * 2)
        (carried,) = loop.op.outputs
        out = popxl.d2h_stream((2,), popxl.float32)
        ops.host_store(out, carried)
    np.testing.assert_allclose(_stored(ir, out), [32.0, -64.0])


def test_replace_with_identity_goes_through_the_checks() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([1.0, -2.0], np.float32))
        (y,) = create_op(_SCALED, [x], {"factor": 3})
        op = y.producer
        assert op is not None
        replace_with_identity(op)
        assert op.replaced_by_identity and op.inputs == (x,) and op.outputs == (y,)
        out = popxl.d2h_stream((2,), popxl.float32)
        ops.host_store(out, y)
    result = _stored(ir, out)
    np.testing.assert_allclose(result, [1.0, -2.0])


def test_set_parent_input_modified_is_a_checked_rewrite_of_calls_only() -> None:
    ir = popxl.Ir()
    sub = ir.create_empty_graph("sub")
    with sub:
        t = popxl.graph_input((2,), popxl.float32, "t")
        ops.add_(t, popxl.constant(np.ones(2, np.float32)))
    with ir.main_graph:
        x = popxl.variable(np.zeros(2, np.float32), name="x")
        info = ops.call_with_info(sub, x)
        info.set_parent_input_modified(x)
        assert info.op.attrs["modified"] == (0,)
        loop = ops.repeat_with_info(sub, 2, x)
        with pytest.raises(TypeError, match="Only a call"):
            loop.set_parent_input_modified(x)
    with popxl.Session(ir, "ipu_model") as session:
        session.run({})
        np.testing.assert_allclose(session.get_tensor_data(x), [1.0, 1.0])
