"""A program that does not fit the machine's memory is refused before it runs, with one clear error."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jax
import numpy as np
import pytest

import popart
import popxl
from popxl import ops
from popxl.lowering import fit

pytestmark = pytest.mark.placement

WORKER = Path(__file__).with_name("memory_worker.py")


def _worker(mode: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != fit.CHECK_VARIABLE}
    return subprocess.run(
        [sys.executable, str(WORKER), mode], capture_output=True, text=True, timeout=300, env=env, check=False
    )


@pytest.mark.slow
@pytest.mark.skipif(fit.host_available() is None, reason="this machine's available memory cannot be read")
@pytest.mark.parametrize("mode", ["run", "attach"])
def test_too_large_for_this_machine_ends_with_the_error(mode: str) -> None:
    # Sized in the worker from the memory available there and then: 1.5 times it, so it cannot fit by luck.
    done = _worker(mode)
    assert done.returncode == 3, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    message = done.stdout
    flat = " ".join(message.split())  # the message is wrapped to 80 columns wherever its words fall
    assert "but this machine has" in flat and "available" in flat
    assert "Largest buffers:" in flat and "To fit:" in flat
    assert ("matmul_out" in flat) if mode == "run" else ("remote buffer" in flat)
    assert all(len(line) <= 80 for line in message.splitlines())


@pytest.fixture(autouse=True)
def fresh_reading() -> Iterator[None]:
    """Each test reads the machine's memory (or its stand-in) anew."""
    fit.forget_reading()
    yield
    fit.forget_reading()


def _small_program() -> tuple[popxl.Ir, popxl.HostToDeviceStream, popxl.Variable]:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        x = popxl.h2d_stream((64, 64), popxl.float32, name="x")
        v = popxl.variable(np.zeros((64, 64), np.float32), name="v")
        xv = ops.host_load(x)
        ops.var_updates.accumulate_(v, ops.gelu(ops.matmul(xv, xv)))
    return ir, x, v


def test_refused_run_changes_nothing_and_the_check_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    ir, x, v = _small_program()
    feeds = {x: np.ones((64, 64), np.float32)}
    with popxl.Session(ir, "cpu") as session:
        session.run(feeds)
        before = session.get_tensor_data(v).copy()
        monkeypatch.setattr(fit, "host_available", lambda: 1000)
        fit.forget_reading()
        with pytest.raises(popxl.OutOfMemoryError, match="has 1000 B available") as caught:
            session.run(feeds)
        assert isinstance(caught.value, popart.OutOfMemoryException)
        assert isinstance(caught.value, popart.popart_exception)
        with pytest.raises(popxl.OutOfMemoryError):
            session.check_memory(feeds)
        np.testing.assert_array_equal(session.get_tensor_data(v), before)  # nothing ran: the same bytes
        monkeypatch.setenv(fit.CHECK_VARIABLE, "0")
        session.run(feeds)
        assert not np.array_equal(session.get_tensor_data(v), before)


def test_refused_attach_allocates_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    ir, _, _ = _small_program()
    monkeypatch.setattr(fit, "host_available", lambda: 100)
    session = popxl.Session(ir, "cpu")
    with pytest.raises(popxl.OutOfMemoryError, match=r"variable 'v'") as caught:
        session.__enter__()
    assert "16.0 KiB" in str(caught.value)  # 64 x 64 float32
    assert not session.is_attached


def _two_variables(replicas: int = 1) -> popxl.Ir:
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        for name in ("a", "b"):
            ops.var_updates.accumulate_(popxl.variable(np.ones((64, 64), np.float32), name=name), popxl.constant(1.0))
    return ir


def test_attaching_counts_the_host_values_it_lets_go(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two 16 KiB variables: on a CPU, each host value goes once its copy is placed, so attaching needs 16 KiB at
    # its peak, not 32 KiB; keeping the host copies (weights_to_host_on_exit=False), it needs both.
    monkeypatch.setattr(fit, "host_available", lambda: 24 * 2**10)
    with popxl.Session(_two_variables(), "cpu") as session:
        assert session.is_attached
    with pytest.raises(popxl.OutOfMemoryError, match=r"32\.0 KiB"):
        popxl.Session(_two_variables(), "cpu", weights_to_host_on_exit=False).__enter__()


def test_every_cpu_device_takes_from_the_same_host_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    # Four replicas on four CPU devices hold 16 KiB each of each variable. A variable's one 16 KiB host value
    # goes once its copies are placed: 28 KiB a device at the peak (a's 16, less a quarter of its host value,
    # then b's 16), 112 KiB of the one host memory in all.
    monkeypatch.setattr(fit, "host_available", lambda: 100 * 2**10)
    session = popxl.Session(_two_variables(4), "cpu", replica_mode="devices")
    with pytest.raises(popxl.OutOfMemoryError, match=r"28\.0 KiB of device memory on each of its 4 devices"):
        session.__enter__()
    monkeypatch.setattr(fit, "host_available", lambda: 120 * 2**10)
    fit.forget_reading()
    with session:
        assert session.is_attached


@pytest.mark.skipif(fit._malloc_trim is None, reason="no malloc_trim here (not glibc)")
def test_freed_memory_still_resident_is_given_back_before_refusing(monkeypatch: pytest.MonkeyPatch) -> None:
    # Stands in for a machine whose available memory is low only because earlier runs' freed temporaries are
    # still resident in the heap: once given back to the OS, the run fits.
    given_back: list[bool] = []
    monkeypatch.setattr(fit, "host_available", lambda: 2**40 if given_back else 1000)
    monkeypatch.setattr(fit, "_malloc_trim", lambda pad: given_back.append(True) or 1)
    ir, x, _ = _small_program()
    with popxl.Session(ir, "cpu") as session:
        given_back.clear()  # attaching gave freed memory back too: the run starts short again
        fit.forget_reading()
        session.run({x: np.ones((64, 64), np.float32)})
        assert given_back


def test_xlas_own_out_of_memory_error_becomes_the_same_error() -> None:
    # A GPU's allocator raises RESOURCE_EXHAUSTED inside XLA; this CPU's never does, so the step is replaced.
    ir, x, _ = _small_program()
    feeds = {x: np.ones((64, 64), np.float32)}
    with popxl.Session(ir, "cpu") as session:
        session.run(feeds)
        (compiled,) = session._program._compiled.values()

        class Exhausted:
            """The compiled step, but running it fails as a GPU's allocator does."""

            def __init__(self, step: object) -> None:
                self.as_text = step.as_text  # type: ignore[attr-defined]

            def __call__(self, *args: object) -> None:
                raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.0GiB.")

        compiled.step = Exhausted(compiled.step)
        with pytest.raises(popxl.OutOfMemoryError, match="XLA: RESOURCE_EXHAUSTED") as caught:
            session.run(feeds)
        assert "Largest buffers:" in str(caught.value)


def test_largest_temporaries_are_named_by_the_op_that_makes_them() -> None:
    def step(x: jax.Array) -> jax.Array:
        with jax.named_scope("wide"):
            y = jax.numpy.outer(x, x)
        with jax.named_scope("narrow"):
            z = jax.numpy.tanh(x) @ y
        return z @ y

    hlo = jax.jit(step).lower(np.ones(256, np.float32)).compile().as_text()
    largest = fit.largest_temporaries(hlo)
    assert largest[0].name.startswith("wide f32[256,256]")
    assert largest[0].nbytes == 256 * 256 * 4


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (24, "24 B"),
        (1023, "1023 B"),
        (1536, "1.50 KiB"),
        (15 << 20, "15.0 MiB"),
        (300 << 30, "300 GiB"),
        ((1 << 20) - 1, "1.00 MiB"),  # 1023.999 KiB rounds to 1024: the next unit up
        (-1536, "-1.50 KiB"),
    ],
)
def test_format_bytes(n: int, text: str) -> None:
    assert fit.format_bytes(n) == text
