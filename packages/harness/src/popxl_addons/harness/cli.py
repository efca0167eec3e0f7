"""`popxl-addons-harness`: check modules serialised against not serialised, and report."""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from popxl_addons.core import IO_MODES
from popxl_addons.harness.builtin import BUILTIN_CASES
from popxl_addons.harness.cases import REMOTE_MEMORIES, Case, Variant
from popxl_addons.harness.equivalence import Outcome, TensorReport, check


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v)


def parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(
        prog="popxl-addons-harness",
        description="Check that batch-serialised modules compute what the plain modules compute.",
    )
    p.add_argument("target", nargs="?", help="MODULE:CLASS of a popxl_addons Module (default: the built-in cases)")
    p.add_argument("--input-shape", type=_ints, help="shape of the module's one input, e.g. 4,8 (with a target)")
    p.add_argument(
        "--kwargs", type=json.loads, default={}, help="constructor arguments as JSON, e.g. '{\"out_features\": 4}'"
    )
    p.add_argument("--grad", action="store_true", help="serialise forward and gradient (with a target)")
    p.add_argument("--steps", type=_ints, help="step counts, e.g. 1,2,4")
    p.add_argument("--rows", type=_ints, help="row counts, e.g. 1,2")
    p.add_argument("--io-modes", type=lambda s: tuple(s.split(",")), help=f"subset of {','.join(IO_MODES)}")
    p.add_argument(
        "--remote-memories",
        type=lambda s: tuple(s.split(",")),
        help=f"where remote buffers live, a subset of {','.join(REMOTE_MEMORIES)} (default: both)",
    )
    p.add_argument("--cases", type=lambda s: tuple(s.split(",")), help="built-in case names to run")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    p.add_argument("--no-measure", action="store_true", help="skip timing and XLA memory figures")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON")
    p.add_argument("--html", metavar="PATH", help="write the report as HTML")
    p.add_argument("--plot", metavar="PATH", help="write a PNG timeline of the serialised schedules")
    return p


def select_cases(args: argparse.Namespace) -> list[Case]:
    """The cases the arguments ask for."""
    if args.target:
        module_name, _, class_name = args.target.partition(":")
        if not class_name or not args.input_shape:
            raise SystemExit("a target is MODULE:CLASS and needs --input-shape")
        cls = getattr(importlib.import_module(module_name), class_name)
        kwargs = dict(args.kwargs)
        cases = [Case(class_name, lambda layout: cls(**kwargs), tuple(args.input_shape), grad=args.grad)]
    else:
        cases = [c for c in BUILTIN_CASES if not args.cases or c.name in args.cases]
        if args.cases and len(cases) != len(args.cases):
            known = ", ".join(c.name for c in BUILTIN_CASES)
            raise SystemExit(f"unknown case in {args.cases}; built-in cases: {known}")
    changes: dict[str, Any] = {}
    for key in ("steps", "rows", "io_modes", "remote_memories"):
        if getattr(args, key):
            changes[key] = getattr(args, key)
    return [replace(c, **changes) for c in cases]


def _check_in_worker(argv: Sequence[str], index: int, measure: bool) -> tuple[int, Any, Any, Any, Any]:
    variants = [v for c in select_cases(parser().parse_args(argv)) for v in c.variants()]
    o = check(variants[index], measure)
    return index, [t.__dict__ for t in o.tensors], o.memory, o.seconds, o.error


def run_all(argv: Sequence[str], variants: list[Variant], jobs: int, measure: bool, console: Console) -> list[Outcome]:
    """Check every variant, in `jobs` processes, with a progress bar."""
    outcomes: list[Outcome | None] = [None] * len(variants)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("checking", total=len(variants))
        if jobs <= 1:
            for i, v in enumerate(variants):
                progress.update(task, description=v.id)
                outcomes[i] = check(v, measure)
                progress.advance(task)
        else:
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(jobs, mp_context=context) as pool:
                futures = [pool.submit(_check_in_worker, list(argv), i, measure) for i in range(len(variants))]
                for future in as_completed(futures):
                    i, tensors, memory, seconds, error = future.result()
                    outcome = Outcome(variants[i], [TensorReport(**t) for t in tensors], memory, seconds, error)
                    outcomes[i] = outcome
                    progress.update(task, description=variants[i].id)
                    progress.advance(task)
    return [o for o in outcomes if o is not None]


def write_plot(cases: list[Case], path: str) -> None:
    """Plot the schedules of the first forward case at its largest step count, one panel per io_mode."""
    from popxl_addons.harness.plot import plot_schedules
    from popxl_addons.harness.programs import serialised_program
    from popxl_addons.harness.schedule import schedule

    case = next((c for c in cases if not c.grad), cases[0])
    steps = max(case.steps)
    schedules = {}
    for mode in case.io_modes:
        variant = Variant(case, mode, steps, 1, case.stores[0], case.loads[0], case.layouts[0], case.remote_memories[0])
        program = serialised_program(variant)
        assert program.serialised is not None and program.compute is not None
        schedules[mode] = schedule(program.serialised, program.compute)
    plot_schedules(schedules, path, f"{case.name}: {steps} steps, as the serialised graph orders its ops")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the harness; returns 1 when any variant does not match."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    # Wide enough for the table when the output is not a terminal (CI logs, pipes).
    console = Console(width=None if sys.stdout.isatty() else 130)
    cases = select_cases(args)
    variants = [v for c in cases for v in c.variants()]
    replicas = max(layout.replication for c in cases for layout in c.layouts)
    # One CPU device per replica, for this process and the workers (before JAX starts its backends).
    os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={max(replicas, 1)}")
    console.print(f"{len(variants)} variants of {len(cases)} case(s), {args.jobs} worker(s)")
    outcomes = run_all(argv, variants, args.jobs, not args.no_measure, console)
    from popxl_addons.harness import report

    console.print(report.table(outcomes))
    failed = [o for o in outcomes if not o.passed]
    for o in failed:
        console.print(o.report(), markup=False)
    console.print(f"{len(outcomes) - len(failed)} passed, {len(failed)} failed")
    for path in (args.json, args.html, args.plot):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    if args.json:
        report.write_json(outcomes, args.json)
    if args.html:
        report.write_html(outcomes, args.html)
    if args.plot:
        write_plot(cases, args.plot)
        console.print(f"schedule plot written to {args.plot}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
