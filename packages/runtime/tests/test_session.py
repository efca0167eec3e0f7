"""Session inputs, layouts and errors: bad input is refused and loses nothing."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import popxl
from popxl import ops


def _counter_program(
    nht: int = 2, replicas: int = 1
) -> tuple[popxl.Ir, popxl.HostToDeviceStream, popxl.DeviceToHostStream, popxl.Variable]:
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        h = popxl.h2d_stream((3,), popxl.float32, "x")
        d = popxl.d2h_stream((3,), popxl.float32, "y")
        v = popxl.variable(np.zeros(3, np.float32), name="total")
        body = ir.create_empty_graph("body")
        with body:
            vin = popxl.graph_input((3,), popxl.float32, "v", by_ref=True)
            x = ops.host_load(h)
            ops.var_updates.accumulate_(vin, x)
            ops.host_store(d, x * 2.0)
        ops.repeat(body, nht, v)
    ir.num_host_transfers = nht
    return ir, h, d, v


def test_run_validates_streams_shapes_and_dtypes_and_keeps_state() -> None:
    ir, h, d, v = _counter_program()
    other = popxl.Ir()
    with other.main_graph:
        stranger = popxl.h2d_stream((3,), popxl.float32, "stranger")
    good = np.ones((2, 3), np.float32)
    with popxl.Session(ir, "cpu") as s:
        s.run({h: good})
        with pytest.raises(ValueError, match="missing: \\['x'\\]"):
            s.run({})
        with pytest.raises(ValueError, match="unexpected: \\['stranger'\\]"):
            s.run({h: good, stranger: good})
        with pytest.raises(ValueError, match=r"stream 'x' has shape \(2, 4\), expected \(2, 3\)"):
            s.run({h: np.ones((2, 4), np.float32)})
        with pytest.raises(ValueError, match=r"stream 'x' has shape \(1, 3\)"):
            s.run({h: np.ones((1, 3), np.float32)})
        with pytest.raises(ValueError, match="dtype int32, expected float32"):
            s.run({h: np.ones((2, 3), np.int32)})
        np.testing.assert_allclose(s.get_tensor_data(v), 2)
        out = s.run({h: np.ones((3, 3), np.float64)})
    np.testing.assert_allclose(out[d], 2)
    np.testing.assert_allclose(s.get_tensor_data(v), 4)


def test_host_layout_with_replicas_and_transfers() -> None:
    ir, h, d, v = _counter_program(nht=3, replicas=2)
    data = np.arange(18, dtype=np.float32).reshape(3, 2, 3)
    with popxl.Session(ir, "cpu", replica_mode="simulate") as s:
        out = s.run({h: data})[d]
    assert out.shape == (3, 2, 3)
    np.testing.assert_allclose(out, data * 2)
    np.testing.assert_allclose(s.get_tensor_data(v), data[:, 0].sum(0))


def test_variable_write_errors() -> None:
    ir, h, d, v = _counter_program()
    s = popxl.Session(ir, "cpu")
    with pytest.raises(TypeError, match="dtype float64"):
        s.write_variable_data(v, np.zeros(3))
    with pytest.raises(ValueError, match=r"shape \(4,\), expected \(3,\)"):
        s.write_variable_data(v, np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="is not of type Variable"):
        s.write_variables_data({h: np.zeros(3, np.float32)})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="is not of type Constant or Variable"):
        s.get_tensor_data(d)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Must be attached"):
        s.run({h: np.zeros((2, 3), np.float32)})
    np.testing.assert_array_equal(s.get_tensor_data(v), 0)


def test_replication_factor_is_frozen_by_a_session() -> None:
    ir, *_ = _counter_program()
    popxl.Session(ir, "cpu")
    with pytest.raises(RuntimeError, match="replication factor"):
        ir.replication_factor = 2


def test_devices_and_ipu_aliases() -> None:
    ir, h, d, _ = _counter_program()
    with pytest.raises(ValueError, match="Unknown device"):
        popxl.Session(ir, "tpu9")
    if not any(d.platform == "gpu" for d in jax.devices()):
        with pytest.raises(ValueError, match="JAX sees no such device"):
            popxl.Session(ir, "gpu")
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run({h: np.ones((2, 3), np.float32)})[d]
    np.testing.assert_allclose(out, 2)


@pytest.mark.parametrize(("nht", "replicas"), [(1, 1), (3, 1), (1, 2), (3, 2)])
def test_host_layout_round_trips_popxl_layout(nht: int, replicas: int) -> None:
    layout = popxl.HostLayout(nht, replicas, replicas)
    data = np.arange(nht * replicas * 4, dtype=np.float32).reshape(nht, replicas, 4)
    host = layout.from_transfers_major(data)
    # popxl's layout: a transfers axis only when there are several, a replica axis only when replicated.
    expected = data if replicas > 1 else data[:, 0]
    expected = expected if nht > 1 else expected[0]
    np.testing.assert_array_equal(host, expected)
    assert host.shape == layout.shape((4,)) and layout.accepts((4,), host.shape)
    program = layout.to_replica_major(host)
    np.testing.assert_array_equal(program, np.swapaxes(data, 0, 1))
    np.testing.assert_array_equal(layout.from_replica_major(program), host)
