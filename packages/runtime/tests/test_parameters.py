"""Every parameter of popxl's API either does what popxl does or is refused by an error naming it."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import ipu_only, ops
from popxl.transforms import autodiff

# --- check_inputs (call_with_info, repeat_with_info, conditional_with_info) -------------------------------


def _two_input_graph(ir: popxl.Ir) -> popxl.Graph:
    def add(a: popxl.Tensor, b: popxl.Tensor) -> popxl.Tensor:
        return a + b

    spec = popxl.TensorSpec((2,), popxl.float32)
    return ir.create_graph(add, spec, spec)


def test_check_inputs_true_reports_the_missing_input() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        g = _two_input_graph(ir)
        with pytest.raises(ValueError, match="missing inputs") as e:
            ops.call_with_info(g, popxl.constant(np.ones(2, np.float32)))
    assert "check_inputs" not in str(e.value)


@pytest.mark.parametrize("kind", ["call", "repeat", "conditional"])
def test_check_inputs_false_is_refused_naming_it_when_an_input_is_missing(kind: str) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        g = _two_input_graph(ir)
        x = popxl.constant(np.ones(2, np.float32))
        with pytest.raises(ValueError, match=r"check_inputs=False.*unconnected"):
            if kind == "call":
                ops.call_with_info(g, x, check_inputs=False)
            elif kind == "repeat":
                ops.repeat_with_info(g, 2, x, check_inputs=False)
            else:
                cond = popxl.constant(True)
                ops.conditional_with_info(cond, g, g, [x], [x, x], check_inputs=False)


def test_check_inputs_false_with_every_input_runs_as_popxl() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        g = _two_input_graph(ir)
        x = popxl.constant(np.array([1.0, 2.0], np.float32))
        (y,) = ops.call_with_info(g, x, inputs_dict={g.inputs[1]: x}, check_inputs=False).outputs
        (z,) = ops.repeat_with_info(g, 1, x, x, check_inputs=False).outputs
        d2h_y, d2h_z = popxl.d2h_stream(y.shape, y.dtype), popxl.d2h_stream(z.shape, z.dtype)
        ops.host_store(d2h_y, y)
        ops.host_store(d2h_z, z)
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    np.testing.assert_allclose(out[d2h_y], [2.0, 4.0])
    np.testing.assert_allclose(out[d2h_z], [2.0, 4.0])


# --- downcast (constant, variable and the remote and sharded variables) --------------------------------------


@pytest.mark.parametrize("data", [np.arange(3, dtype=np.int64), np.ones(2, np.float64), 7, 1.5])
def test_downcast_true_narrows_64_bit_data(data: object) -> None:
    with popxl.Ir().main_graph:
        c = popxl.constant(data)
        v = popxl.variable(data)
    assert c.dtype in (popxl.int32, popxl.float32)
    assert v.dtype is c.dtype


@pytest.mark.parametrize("data", [np.arange(3, dtype=np.int64), np.ones(2, np.float64), 7, 1.5])
def test_downcast_false_of_64_bit_data_is_refused_naming_it(data: object) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(TypeError, match="downcast=False"):
            popxl.constant(data, downcast=False)
        with pytest.raises(TypeError, match="downcast=False"):
            popxl.variable(data, downcast=False)
        buffer = popxl.remote_buffer(np.shape(np.asarray(data)), popxl.int32, 1)
        with pytest.raises(TypeError, match="downcast=False"):
            popxl.remote_variable(data, buffer, downcast=False)


def test_downcast_false_keeps_narrow_data_and_a_given_dtype() -> None:
    with popxl.Ir().main_graph:
        assert popxl.constant(np.ones(2, np.float16), downcast=False).dtype is popxl.float16
        assert popxl.variable(np.arange(2, dtype=np.int32), downcast=False).dtype is popxl.int32
        # With a dtype, popxl converts to it whatever `downcast` says.
        assert popxl.constant(np.ones(2, np.float64), popxl.float32, downcast=False).dtype is popxl.float32


# --- enable_index_broadcast (scatter_reduce) ------------------------------------------------------------------


def _scatter_sum(data: np.ndarray, indices: np.ndarray, **kwargs: object) -> np.ndarray:
    ir = popxl.Ir()
    with ir.main_graph:
        d = popxl.constant(data)
        i = popxl.constant(indices)
        out = ops.scatter_reduce(d, i, "sum", axis=0, axis_size=3, **kwargs)  # type: ignore[arg-type]
        stream = popxl.d2h_stream(out.shape, out.dtype)
        ops.host_store(stream, out)
    with popxl.Session(ir, "cpu") as session:
        return np.asarray(session.run()[stream])


def test_enable_index_broadcast_broadcasts_a_vector_of_indices() -> None:
    data = np.arange(8, dtype=np.float32).reshape(4, 2)
    got = _scatter_sum(data, np.array([0, 2, 0, 1], np.int32))
    np.testing.assert_allclose(got, [[4, 6], [6, 7], [2, 3]])


def test_enable_index_broadcast_false_with_full_indices_is_the_same_op() -> None:
    data = np.arange(8, dtype=np.float32).reshape(4, 2)
    indices = np.array([[0, 1], [2, 2], [0, 0], [1, 1]], np.int32)
    expected = np.zeros((3, 2), np.float32)
    for r in range(4):
        for c in range(2):
            expected[indices[r, c], c] += data[r, c]
    np.testing.assert_allclose(_scatter_sum(data, indices, enable_index_broadcast=False), expected)


def test_enable_index_broadcast_false_with_vector_indices_is_refused_naming_it() -> None:
    with popxl.Ir().main_graph:
        d = popxl.constant(np.zeros((4, 2), np.float32))
        i = popxl.constant(np.array([0, 2, 0, 1], np.int32))
        with pytest.raises(ValueError, match="enable_index_broadcast=False"):
            ops.scatter_reduce(d, i, "sum", axis_size=3, enable_index_broadcast=False)
        with pytest.raises(ValueError, match="enable_index_broadcast must be"):
            ops.scatter_reduce(d, i, "sum", axis_size=3, enable_index_broadcast=2)  # type: ignore[arg-type]


# --- autodiff's _backward: only the gradients wanted are built ------------------------------------------------


def test_autodiff_builds_no_gradient_for_tensors_not_required() -> None:
    ir = popxl.Ir()
    with ir.main_graph:

        def f(a: popxl.Tensor, b: popxl.Tensor, c: popxl.Tensor) -> tuple[popxl.Tensor, popxl.Tensor]:
            return a * b, ops.exp(c)

        spec = popxl.TensorSpec((2,), popxl.float32)
        g = ir.create_graph(f, spec, spec, spec)
    info = autodiff(g, grads_provided=[g.outputs[0]], grads_required=[g.inputs[0]])
    names = [op.name for op in info.graph.ops]
    # One gradient op for `a` through `a * b`; nothing for `c`'s exp, which no provided gradient reaches.
    assert "exp" not in names and all("exp" not in n for n in names), names
    assert [ec.fwd_tensor for ec in info.expected_inputs][1:] == [g.inputs[1]]


# --- IPU-only arguments: checked as popart checks them, recorded, and changing nothing --------------------------


def test_ipu_only_arguments_are_recorded_and_change_nothing() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.constant(np.arange(12, dtype=np.float32).reshape(4, 3))
        i = popxl.constant(np.array([3, 0], np.int32))
        plain = ops.gather(t, i)
        tuned = ops.gather(t, i, available_memory_proportion=0.25)
        s_plain, s_tuned = popxl.d2h_stream(plain.shape, plain.dtype), popxl.d2h_stream(tuned.shape, tuned.dtype)
        ops.host_store(s_plain, plain)
        ops.host_store(s_tuned, tuned)
    assert ipu_only.recorded(tuned.producer) == {"available_memory_proportion": 0.25}  # type: ignore[arg-type]
    assert ipu_only.recorded(plain.producer) == {}  # type: ignore[arg-type]
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    np.testing.assert_array_equal(out[s_plain], out[s_tuned])


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda t, i: ops.gather(t, i, available_memory_proportion=0.0), "available_memory_proportion"),
        (lambda t, i: ops.gather(t, i, available_memory_proportion=1.5), "available_memory_proportion"),
        (lambda t, i: ops.scatter(t, i, t, available_memory_proportion=-1), "available_memory_proportion"),
        (lambda t, i: ops.dynamic_slice(t, i[:1], [0], [1], no_overlap="yes"), "no_overlap"),  # type: ignore[arg-type]
        (lambda t, i: ops.topk(t, 1, 0, True, True, available_memory_proportion=2.0), "available_memory_proportion"),
        (lambda t, i: ops.matmul(t, t, available_memory_proportion=0.0), "available_memory_proportion"),
        (lambda t, i: ops.matmul(t, t, partials_type=popxl.int32), "partials_type"),
    ],
)
def test_invalid_ipu_only_arguments_are_refused_naming_them(make: object, name: str) -> None:
    with popxl.Ir().main_graph:
        t = popxl.constant(np.zeros((4,), np.float32))
        i = popxl.constant(np.array([0, 1, 2, 3], np.int32))
        with pytest.raises(ValueError, match=name):
            make(t, i)  # type: ignore[operator]


def test_matmul_options_are_recorded() -> None:
    with popxl.Ir().main_graph:
        t = popxl.constant(np.ones((2, 2), np.float32))
        y = ops.matmul(t, t, available_memory_proportion=0.4, partials_type=popxl.float16)
        assert ipu_only.recorded(y.producer) == {  # type: ignore[arg-type]
            "available_memory_proportion": 0.4,
            "partials_type": "half",
        }


def test_conv_options_are_checked_and_recorded() -> None:
    with popxl.Ir().main_graph:
        x = popxl.constant(np.zeros((1, 1, 4, 4), np.float32))
        w = popxl.constant(np.zeros((1, 1, 3, 3), np.float32))
        y = ops.conv(x, w, available_memory_proportions=[0.5], partials_types=["HALF"], enable_conv_dithering=[1])
        assert ipu_only.recorded(y.producer) == {  # type: ignore[arg-type]
            "available_memory_proportions": (0.5,),
            "partials_types": ("half",),
            "enable_conv_dithering": (True,),
        }
        with pytest.raises(ValueError, match="partials_types"):
            ops.conv(x, w, partials_types=["double"])
        with pytest.raises(ValueError, match="available_memory_proportions"):
            ops.conv(x, w, available_memory_proportions=0.5)  # type: ignore[arg-type]


def test_record_refuses_an_unknown_argument() -> None:
    with popxl.Ir().main_graph:
        y = popxl.constant(np.zeros(2, np.float32)) + 1
        with pytest.raises(TypeError, match="not an IPU-only argument"):
            ipu_only.record(y, tile_count=4)


def test_max_pool_storage_order_is_checked() -> None:
    with popxl.Ir().main_graph:
        x = popxl.constant(np.zeros((1, 1, 4, 4), np.float32))
        assert ops.max_pool(x, (2, 2), storage_order="column").shape == (1, 1, 3, 3)
        with pytest.raises(ValueError, match="storage_order"):
            ops.max_pool(x, (2, 2), storage_order="diagonal")  # type: ignore[arg-type]


def test_set_parent_input_modified_records_infer_modified_regions() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.zeros(2, np.float32))

        def bump(t: popxl.Tensor) -> None:
            ops.var_updates.accumulate_(t, popxl.constant(np.ones(2, np.float32)))

        g = ir.create_graph(bump, v)
        info = ops.call_with_info(g, v)
        info.set_parent_input_modified(v, infer_modified_regions=True)
        assert ipu_only.recorded(info.op)["infer_modified_regions"] is True
        with pytest.raises(ValueError, match="infer_modified_regions"):
            info.set_parent_input_modified(v, infer_modified_regions=3)  # type: ignore[arg-type]
    with popxl.Session(ir, "cpu") as session:
        session.run()
        np.testing.assert_allclose(session.get_tensor_data(v), [1.0, 1.0])
