"""Graph construction, ids, calls and loops."""

from __future__ import annotations

import numpy as np
import pytest
from runtime_helpers import run_main

import popxl
from popxl import ops


def test_create_graph_names_inputs_after_parameters_and_ids_follow_popxl() -> None:
    ir = popxl.Ir()

    def fn(x: popxl.Tensor, ys: list[popxl.Tensor], scale: float) -> popxl.Tensor:
        with popxl.name_scope("inner"):
            w = popxl.graph_input((2,), popxl.float32, "w")
            z = (x + ys[0]) * w
            z2 = x + ys[1]
        return z * scale + z2

    with ir.main_graph:
        spec = popxl.TensorSpec((2,), popxl.float32)
        g = ir.create_graph(fn, spec, [spec, spec], 2.0)
        g2 = ir.create_empty_graph("empty")
    base = fn.__qualname__.replace(".<locals>", "")
    assert g.id == f"{base}_subgraph(0)" and g2.id == "empty_subgraph(1)"
    assert [t.name for t in g.inputs] == ["x", "ys_0", "ys_1", "inner/w"]
    add_ids = [t.id for op in g.ops for t in op.outputs if op.name == "add"]
    assert add_ids[0] == f"{g.id}/inner/add_out"
    assert add_ids[1].startswith(f"{g.id}/inner/add_out__t") and add_ids[2] == f"{g.id}/add_out"
    assert len(g.outputs) == 1


def test_create_graph_keeps_keywords_after_a_skipped_default() -> None:
    seen: dict[str, object] = {}

    def fn(x: popxl.Tensor, op: str = "add", scale: float = 1.0, *rest: float, **extra: popxl.Tensor) -> popxl.Tensor:
        seen.update(op=op, scale=scale, rest=rest, extra=sorted(extra))
        return x * scale

    ir = popxl.Ir()
    with ir.main_graph:
        spec = popxl.TensorSpec((2,), popxl.float32)
        ir.create_graph(fn, spec, scale=3.0)
        assert seen == {"op": "add", "scale": 3.0, "rest": (), "extra": []}
        g = ir.create_graph(fn, spec, "mul", 2.0, 5.0, y=spec)
        assert seen == {"op": "mul", "scale": 2.0, "rest": (5.0,), "extra": ["y"]}
        assert [t.name for t in g.inputs] == ["x", "y"]


def test_create_graph_errors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(ValueError, match="signature"):
            ir.create_graph(lambda x: x, popxl.TensorSpec((1,), popxl.float32), 3)
        with pytest.raises(ValueError, match="must return"):
            ir.create_graph(lambda x: 3, popxl.TensorSpec((1,), popxl.float32))
        with pytest.raises(TypeError, match="mixes tensors"):
            ir.create_graph(lambda xs: xs[0], [popxl.TensorSpec((1,), popxl.float32), 1])
        spec = popxl.TensorSpec((1,), popxl.float32)
        for args, kwargs in (((spec, 5), {}), ((5, spec), {}), ((), {"a": spec, "b": 5})):
            with pytest.raises(TypeError, match="mixes tensors"):
                ir.create_graph(lambda *a, **k: None, *args, **kwargs)
        with pytest.raises(ValueError, match="main graph"):
            ir.create_graph(lambda: popxl.variable(1.0))
    with pytest.raises(RuntimeError, match="No current graph"):
        popxl.gcg()


def test_call_and_call_with_info() -> None:
    x = np.arange(4, dtype=np.float32)
    info_holder: list[ops.CallSiteInfo] = []

    def build() -> dict[str, popxl.Tensor]:
        ir = popxl.gir()
        g = ir.create_graph(
            lambda a, b: (a * b, a + b), popxl.TensorSpec((4,), popxl.float32), popxl.TensorSpec((4,), popxl.float32)
        )
        a = popxl.constant(x)
        prod, total = ops.call(g, a, 2.0)
        info = ops.call_with_info(g, a, inputs_dict={g.inputs[1]: prod})
        info_holder.append(info)
        assert info.graph_to_parent(g.inputs[0]) is a
        assert info.parent_to_graph(prod) is g.inputs[1]
        assert info.graph_to_parent(g.outputs[1]) is info.outputs[1]
        with pytest.raises(ValueError, match="neither an input nor an output"):
            info.graph_to_parent(a)
        return {"prod": prod, "total": total, "again": info.outputs[0]}

    out = run_main(build)
    np.testing.assert_allclose(out["prod"], x * 2)
    np.testing.assert_allclose(out["total"], x + 2)
    np.testing.assert_allclose(out["again"], x * x * 2)


def test_call_input_validation() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        g = ir.create_graph(
            lambda a, b: a + b, popxl.TensorSpec((2,), popxl.float32), popxl.TensorSpec((2,), popxl.float32)
        )
        a = popxl.constant(np.zeros(2, np.float32))
        with pytest.raises(ValueError, match="missing"):
            ops.call(g, a)
        with pytest.raises(ValueError, match="given twice"):
            ops.call(g, a, a, inputs_dict={g.inputs[0]: a})
        with pytest.raises(ValueError, match="3 inputs given"):
            ops.call(g, a, a, a)
        with pytest.raises(ValueError, match="not an input"):
            ops.call(g, a, inputs_dict={a: a})
        with pytest.raises(TypeError, match="Cannot feed"):
            ops.call(g, a, "x")
        with pytest.raises(ValueError, match=r"expects float32 \(2,\)"):
            ops.call(g, a, popxl.constant(np.zeros(3, np.float32)))


def test_by_ref_input_modified_in_call_reaches_the_variable() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.ones(3, np.float32), name="v")

        def bump(t: popxl.TensorByRef, by: popxl.Tensor) -> None:
            ops.var_updates.accumulate_(t, by)

        def copy_bump(t: popxl.Tensor, by: popxl.Tensor) -> None:
            ops.var_updates.accumulate_(t, by)

        spec = popxl.TensorSpec((3,), popxl.float32)
        g = ir.create_graph(bump, spec, spec)
        g_copy = ir.create_graph(copy_bump, spec, spec)
        assert g.is_by_ref(g.inputs[0]) and not g_copy.is_by_ref(g_copy.inputs[0])
        two = popxl.constant(np.full(3, 2, np.float32))
        ops.call(g_copy, v, two)
        ops.call(g, v, two)
        after = ops.identity(v)
        d = popxl.d2h_stream((3,), popxl.float32, "after")
        ops.host_store(d, after)
    with popxl.Session(ir, "cpu") as s:
        out = s.run()[d]
    np.testing.assert_allclose(out, 3.0)
    np.testing.assert_allclose(s.get_tensor_data(v), 3.0)


def test_repeat_carries_outputs_and_accumulates_by_ref() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        acc = popxl.variable(np.zeros(2, np.float32), name="acc")

        def body(
            i: popxl.Tensor, x: popxl.Tensor, total: popxl.TensorByRef, step: popxl.Tensor
        ) -> tuple[popxl.Tensor, popxl.Tensor]:
            ops.var_updates.accumulate_(total, x)
            return i + 1, x * step

        g = ir.create_graph(
            body,
            popxl.TensorSpec((), popxl.int32),
            popxl.TensorSpec((2,), popxl.float32),
            popxl.TensorSpec((2,), popxl.float32),
            popxl.TensorSpec((2,), popxl.float32),
        )
        i, x = ops.repeat(g, 5, 0, popxl.constant(np.array([1, 2], np.float32)), acc, 2.0)
        di, dx = popxl.d2h_stream((), popxl.int32, "i"), popxl.d2h_stream((2,), popxl.float32, "x")
        ops.host_store(di, i)
        ops.host_store(dx, x)
    with popxl.Session(ir, "cpu") as s:
        out = s.run()
    assert out[di] == 5
    np.testing.assert_allclose(out[dx], [32, 64])
    np.testing.assert_allclose(s.get_tensor_data(acc), np.array([1, 2]) * (1 + 2 + 4 + 8 + 16))


def test_repeat_validation() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        g = ir.create_graph(lambda x: x + 1.0, popxl.TensorSpec((2,), popxl.float32))
        bad = ir.create_graph(lambda x: ops.reshape(x, (1, 2)), popxl.TensorSpec((2,), popxl.float32))
        x = popxl.constant(np.zeros(2, np.float32))
        with pytest.raises(ValueError, match=">= 0"):
            ops.repeat(g, -1, x)
        with pytest.raises(ValueError, match="must match the input"):
            ops.repeat(bad, 2, x)


def test_repeat_count_does_not_unroll() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        g = ir.create_graph(lambda x: x * 1.5, popxl.TensorSpec((), popxl.float32))
        (y,) = ops.repeat(g, 40, popxl.constant(np.float32(1)))
        d = popxl.d2h_stream((), popxl.float32, "y")
        ops.host_store(d, y)
    with popxl.Session(ir, "cpu") as s:
        out = s.run()[d]
        text = s.traced().lower().compile().as_text()
    np.testing.assert_allclose(out, 1.5**40, rtol=1e-5)
    assert " while(" in text and text.count(" multiply(") < 5


def test_in_sequence_and_annotations_are_recorded() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        a = popxl.constant(np.float32(1))
        b = a + 1
        with popxl.io_tiles(), popxl.transforms.merge_exchange():
            c = ops.io_tile_copy(b)
        with popxl.transforms.io_tile_exchange():
            d = ops.identity(c)
    ops_ = ir.main_graph.ops
    assert ops_[1].placement.after == ops_[0].index
    assert ops_[1].placement.tile_set == "io" and ops_[1].placement.exchange_group is not None
    assert d.producer is ops_[2] and ops_[2].placement.tile_set == "io"
    with pytest.raises(TypeError):
        popxl.in_sequence(None)  # type: ignore[arg-type]


def test_remove_ops_takes_ops_out_and_refuses_what_it_would_orphan() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
        sub = ir.create_graph(lambda t: t + 1, x.spec)
        (y,) = ops.call(sub, x)
        y * 2
    call, mul = ir.main_graph.ops[-2:]
    with pytest.raises(ValueError, match="read their outputs"):
        ir.main_graph.remove_ops([call])
    ir.main_graph.remove_ops([call, mul])
    assert call not in ir.main_graph.ops and mul not in ir.main_graph.ops
    assert sub.call_sites == () and [op.index for op in ir.main_graph.ops] == list(range(len(ir.main_graph.ops)))
    with pytest.raises(ValueError, match="not its ops"):
        ir.main_graph.remove_ops([mul])
