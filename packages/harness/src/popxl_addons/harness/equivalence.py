"""Running a variant's two programs on identical data and comparing every result."""

from __future__ import annotations

import logging
import time
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import popxl
from popxl_addons.harness.cases import Case, Variant
from popxl_addons.harness.programs import (
    Program,
    feed,
    host_data,
    micro_batches,
    normal_program,
    serialised_program,
    store_slot,
)

Array = np.ndarray[Any, Any]


@dataclass
class TensorReport:
    """How far one compared tensor is from its reference."""

    name: str
    max_abs: float
    max_rel: float
    where: tuple[int, ...]
    ok: bool

    def describe(self) -> str:
        """One line: the tensor, its errors and where the largest one is."""
        status = "ok" if self.ok else "MISMATCH"
        diffs = f"max abs diff {self.max_abs:.3g}, max rel diff {self.max_rel:.3g}"
        return f"{self.name}: {diffs} at {self.where} [{status}]"


VERDICTS = ("PASS", "FAIL", "ERROR", "SKIP")


@dataclass
class Outcome:
    """The result of checking one variant.

    Its verdict is PASS (every tensor matched), FAIL (numbers differ), ERROR
    (the programs could not be built or run: `error` is the traceback) or SKIP
    (the variant cannot run as asked: `skipped` says why).
    """

    variant: Variant
    tensors: list[TensorReport] = field(default_factory=list)
    memory: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    skipped: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """PASS, FAIL, ERROR or SKIP."""
        if self.skipped is not None:
            return "SKIP"
        if self.error is not None or not self.tensors:
            return "ERROR"
        return "PASS" if all(t.ok for t in self.tensors) else "FAIL"

    @property
    def passed(self) -> bool:
        """Whether every tensor matched and nothing failed."""
        return self.verdict == "PASS"

    @property
    def max_abs(self) -> float:
        """Largest absolute error over all tensors."""
        return max((t.max_abs for t in self.tensors), default=float("nan"))

    @property
    def summary(self) -> str:
        """One line: the worst mismatch, the error's last line, or why the variant was skipped."""
        if self.skipped is not None:
            return self.skipped
        if self.error is not None:
            last = [line for line in self.error.strip().splitlines() if line.strip()]
            return last[-1].strip() if last else "error"
        worst = max(self.tensors, key=lambda t: (not t.ok, t.max_abs), default=None)
        if worst is None:
            return "nothing was compared"
        if worst.ok:
            return f"max abs diff {worst.max_abs:.3g} ({worst.name})"
        return f"{worst.name} differs by {worst.max_abs:.3g} at {worst.where}"

    def report(self) -> str:
        """A readable account of every tensor, or of the failure."""
        lines = [f"{self.variant.id}: {self.verdict}"]
        if self.error:
            lines.append(self.error)
        lines.extend("  " + t.describe() for t in self.tensors)
        return "\n".join(lines)


class _Collect(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


@contextmanager
def collected_warnings(into: list[str]) -> Iterator[None]:
    """Collect the warnings and logged warnings raised inside, instead of printing them."""
    handler = _Collect(into)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
        into.extend(str(w.message) for w in caught)
    finally:
        root.removeHandler(handler)


def compare(name: str, actual: Array, expected: Array, rtol: float, atol: float) -> TensorReport:
    """Errors of `actual` against `expected`."""
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    if actual.shape != expected.shape:
        return TensorReport(f"{name} (shape {actual.shape} != {expected.shape})", float("inf"), float("inf"), (), False)
    diff = np.abs(actual - expected)
    if diff.size == 0:
        return TensorReport(name, 0.0, 0.0, (), True)
    worst = np.unravel_index(int(np.argmax(diff)), diff.shape)
    rel = diff / np.maximum(np.abs(expected), 1e-12)
    ok = bool(np.all(diff <= atol + rtol * np.abs(expected)))
    return TensorReport(name, float(diff.max()), float(rel.max()), tuple(int(i) for i in worst), ok)


def _run(
    program: Program, data: dict[str, Array], seed: int, measure: bool, remote_memory: str
) -> tuple[dict[str, Array], float, dict[str, int]]:
    session = popxl.Session(program.ir, "cpu", remote_memory=remote_memory)
    rng = np.random.default_rng(seed)
    variables = [v for v in program.weights.tensors if isinstance(v, popxl.Variable)]
    weights = {v: rng.normal(0, 0.5, size=v.shape_on_host).astype(v.dtype.as_numpy()) for v in variables}
    session.write_variables_data(weights)
    feeds = feed(program, data)
    with session:
        out = session.run(feeds)
        results = {name: out[stream] for name, stream in program.outputs.items()}
        results.update({k: session.get_tensor_data(t) for k, t in program.results.to_dict().items()})
        seconds, memory = float("nan"), {}
        if measure:
            start = time.perf_counter()
            session.run(feeds)
            seconds = time.perf_counter() - start
            figures = session.memory_analysis(feeds)
            memory = {k: figures[k] for k in ("device_bytes", "host_bytes", "temp")}
    return results, seconds, memory


def _expected_order(variant: Variant) -> list[int]:
    """For each serialised output position, the micro-batch whose value it should hold."""
    if variant.case.grad or variant.case.chain > 1 or variant.store == "stream":
        return list(range(micro_batches(variant)))
    last_writer: dict[int, int] = {}
    for n in range(variant.rows):
        for j in range(variant.steps):
            last_writer[store_slot(variant, n, j)] = n * variant.steps + j
    return [last_writer[store_slot(variant, n, j)] for n in range(variant.rows) for j in range(variant.steps)]


def build_error(case: Case) -> str | None:
    """The traceback of building the case's module and graph once, or None when that works."""
    layout = case.layouts[0]
    ir = popxl.Ir(replication=layout.replication)
    try:
        with ir.main_graph, collected_warnings([]):
            case.module(layout).create_graph(popxl.TensorSpec(case.input_shape, popxl.float32))
    except Exception:  # any failure here would fail every variant of the case the same way
        return traceback.format_exc()
    return None


def check(variant: Variant, measure: bool = False) -> Outcome:
    """Build, run and compare the normal and serialised programs of `variant`."""
    outcome = Outcome(variant, skipped=variant.skip_reason)
    if outcome.skipped is not None:
        return outcome
    try:
        with collected_warnings(outcome.warnings):
            normal, serial = normal_program(variant), serialised_program(variant)
            data = host_data(variant, normal, np.random.default_rng(variant.case.seed))
            memory = variant.remote_memory
            expected, t_normal, m_normal = _run(normal, data, variant.case.seed, measure, memory)
            actual, t_serial, m_serial = _run(serial, data, variant.case.seed, measure, memory)
    except Exception:  # reported per variant, so that one failure does not hide the others
        outcome.error = traceback.format_exc()
        return outcome
    outcome.seconds = {"normal": t_normal, "serialised": t_serial}
    outcome.memory = {"normal": m_normal, "serialised": m_serial}
    order = _expected_order(variant)
    case = variant.case
    for name in expected:
        ref, got = expected[name], actual[name]
        if name in normal.outputs and micro_batches(variant) > 1:
            ref = ref[order]
        outcome.tensors.append(compare(name, got, ref, case.rtol, case.atol))
    return outcome
