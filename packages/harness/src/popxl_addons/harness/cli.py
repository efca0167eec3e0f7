"""`popxl-addons-harness`: check modules serialised against not serialised, and report."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from popxl_addons.core import IO_MODES
from popxl_addons.harness import plan_cli
from popxl_addons.harness.builtin import BUILTIN_CASES
from popxl_addons.harness.cases import REMOTE_MEMORIES, Case, Variant
from popxl_addons.harness.cli_shared import (
    LOG_COLUMNS,
    PROGRESS_SECONDS,
    ArgumentParser,
    UsageError,
    build_module,
    constructor_kwargs,
    fit,
    help_formatter,
    load_target,
    positive_ints,
    progress_console,
    progress_line,
    subset,
)
from popxl_addons.harness.equivalence import Outcome, TensorReport, build_error, check
from popxl_addons.harness.programs import micro_batches

# The most micro-batches (steps x rows) one variant may have: its reference program calls the module once per
# micro-batch, unrolled, and XLA compiles it whole, which takes minutes at a thousand (linear_grad: 7 minutes
# on one core) and grows faster than the count.
MAX_MICRO_BATCHES = 1024
# Variants above this many micro-batches are announced: each takes a while to build and compile.
LARGE_MICRO_BATCHES = 128

DESCRIPTION = """\
Check that batch-serialised modules compute what the plain modules compute.

Each variant runs a module two ways on the same random data: micro-batch by
micro-batch with no transform, and batch-serialised; then it compares every
output, input gradient and accumulated weight gradient. Without a TARGET the
built-in cases run.

  steps     micro-batches one call of the serialised graph loops over
  rows      calls of the serialised graph per run, each on its own rows of
            the remote buffers (row offsets select the entries)
  io_modes  compute: transfers on the compute tiles, in step order
            io: transfers on the IO tiles, in step order
            io_overlapped: step i+1 loaded and step i-1 stored while step i
            computes (needs 2 or more steps)

`popxl-addons-harness plan MODULE:ATTR --input-shape ... --global-batch N
--budget 2GiB [--check]` plans batch serialisation for a device budget.
"""


def say(console: Console, text: str) -> None:
    """Print plain `text` (no markup) on `console`, wrapped to LOG_COLUMNS or the console's width if narrower."""
    console.print(fit(text, min(console.width, LOG_COLUMNS)), markup=False, highlight=False, soft_wrap=True)


def _jobs(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--jobs takes a number of worker processes >= 1, got {text!r}")
    return int(text)


def parser() -> argparse.ArgumentParser:
    """The command line."""
    p = ArgumentParser(
        prog="popxl-addons-harness",
        description=DESCRIPTION,
        formatter_class=help_formatter(argparse.RawDescriptionHelpFormatter),
    )
    p.add_argument(
        "target",
        nargs="?",
        metavar="MODULE:ATTR",
        help="a popxl_addons Module class (or a function returning a Module) to check, e.g. mymodel:Block; "
        "MODULE is imported as `python -m` would, from the working folder first",
    )
    p.add_argument(
        "--input-shape",
        type=positive_ints("--input-shape"),
        help="shape of one micro-batch of the module's one input, e.g. 4,8 (needed with a target)",
    )
    p.add_argument("--kwargs", type=constructor_kwargs, default={}, help="constructor arguments as a JSON object")
    p.add_argument("--grad", action="store_true", help="serialise forward and gradient together (with a target)")
    p.add_argument(
        "--steps",
        type=positive_ints("--steps"),
        help=f"step counts to check, e.g. 1,2,4 (steps x rows at most {MAX_MICRO_BATCHES}: the reference is unrolled)",
    )
    p.add_argument("--rows", type=positive_ints("--rows"), help="row counts to check, e.g. 1,2")
    p.add_argument("--io-modes", type=subset("--io-modes", IO_MODES), help=f"subset of {','.join(IO_MODES)}")
    p.add_argument(
        "--remote-memories",
        type=subset("--remote-memories", REMOTE_MEMORIES),
        help=f"where remote buffers live, a subset of {','.join(REMOTE_MEMORIES)} (default: both)",
    )
    p.add_argument("--cases", type=lambda s: tuple(s.split(",")), help="built-in case names to run")
    p.add_argument("--jobs", type=_jobs, default=os.cpu_count() or 1, help="worker processes (default: one per core)")
    p.add_argument("--no-measure", action="store_true", help="skip timing and memory figures")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON, errors with their tracebacks")
    p.add_argument("--html", metavar="PATH", help="write the report as HTML")
    p.add_argument("--plot", metavar="PATH", help="write a PNG of each case's serialised schedule, per io_mode")
    return p


def select_cases(args: argparse.Namespace) -> list[Case]:
    """The cases the arguments ask for."""
    if args.target:
        if not args.input_shape:
            raise UsageError("a TARGET needs --input-shape, the shape of one micro-batch of its input, e.g. 4,8")
        factory = load_target(args.target)
        kwargs = dict(args.kwargs)
        name = args.target.partition(":")[2]
        cases = [
            Case(name, lambda layout: build_module(factory, kwargs, args.target), args.input_shape, grad=args.grad)
        ]
    else:
        given = [
            f for f, v in (("--input-shape", args.input_shape), ("--kwargs", args.kwargs), ("--grad", args.grad)) if v
        ]
        if given:
            raise UsageError(
                f"{', '.join(given)} describe(s) a TARGET (MODULE:ATTR), and none was given: the built-in cases "
                "have their own; name the module to check, e.g. mymodel:Block"
            )
        known = {c.name for c in BUILTIN_CASES}
        unknown = [c for c in args.cases or () if c not in known]
        if unknown:
            raise UsageError(
                f"--cases: unknown case(s) {', '.join(unknown)}; built-in cases: {', '.join(sorted(known))}"
            )
        cases = [c for c in BUILTIN_CASES if not args.cases or c.name in args.cases]
    changes: dict[str, Any] = {}
    for key in ("steps", "rows", "io_modes", "remote_memories"):
        if getattr(args, key):
            changes[key] = getattr(args, key)
    cases = [replace(c, **changes) for c in cases]
    for case in cases:
        largest = max((micro_batches(v) for v in case.variants()), default=0)
        if largest > MAX_MICRO_BATCHES:
            raise UsageError(
                f"case {case.name}: a variant of {largest} micro-batches (steps x rows) is more than the "
                f"{MAX_MICRO_BATCHES} the harness checks: its reference calls the module once per micro-batch, "
                "unrolled, and building and compiling it takes minutes at a thousand and longer the more there "
                "are; check fewer --steps or --rows (the serialised graph loops: its size does not grow with them)"
            )
    return cases


def _check_in_worker(argv: Sequence[str], index: int, measure: bool) -> tuple[int, dict[str, Any]]:
    variants = [v for c in select_cases(parser().parse_args(argv)) for v in c.variants()]
    o = check(variants[index], measure)
    fields = {"memory": o.memory, "seconds": o.seconds, "error": o.error, "warnings": o.warnings}
    return index, {"tensors": [t.__dict__ for t in o.tensors], **fields}


class _PlainProgress:
    """Progress as plain lines for logs: at most one every PROGRESS_SECONDS (and the last), each fitting
    LOG_COLUMNS."""

    def __init__(self, console: Console, total: int) -> None:
        self.console, self.total, self.done = console, total, 0
        self.start = self.last = time.monotonic()

    def advance(self, variant: Variant) -> None:
        self.done += 1
        now = time.monotonic()
        if now - self.last < PROGRESS_SECONDS and self.done != self.total:
            return
        elapsed = now - self.start
        eta = elapsed / self.done * (self.total - self.done)
        line = progress_line(
            f"[harness] {self.done}/{self.total} variants ({100 * self.done // self.total}%), "
            f"{elapsed:.0f} s, ~{eta:.0f} s left",
            variant.id,
        )
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)
        self.last = now


def run_all(
    argv: Sequence[str],
    variants: list[Variant],
    jobs: int,
    measure: bool,
    console: Console,
    broken: Mapping[str, str] | None = None,
) -> list[Outcome]:
    """Check every variant, in `jobs` processes, showing progress on `console` (standard error).

    Variants of the cases in `broken` (name: the error building their module) are not run but get that error.
    """
    broken = broken or {}
    outcomes: list[Outcome | None] = [None] * len(variants)
    todo = [i for i, v in enumerate(variants) if v.skip_reason is None and v.case.name not in broken]
    for i, v in enumerate(variants):
        if v.case.name in broken:
            outcomes[i] = Outcome(v, error=broken[v.case.name])
        elif v.skip_reason is not None:
            outcomes[i] = Outcome(v, skipped=v.skip_reason)
    if console.is_terminal:
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
        )
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task("starting", total=len(todo))
            _run(
                argv,
                variants,
                todo,
                jobs,
                measure,
                outcomes,
                lambda v: progress.update(task, advance=1, description=v.id),
            )
        return [o for o in outcomes if o is not None]
    plain = _PlainProgress(console, max(len(todo), 1))
    _run(argv, variants, todo, jobs, measure, outcomes, plain.advance)
    return [o for o in outcomes if o is not None]


def _run(
    argv: Sequence[str],
    variants: list[Variant],
    todo: list[int],
    jobs: int,
    measure: bool,
    outcomes: list[Outcome | None],
    done: Callable[[Variant], None],
) -> None:
    if jobs <= 1:
        for i in todo:
            outcomes[i] = check(variants[i], measure)
            done(variants[i])
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        futures = [pool.submit(_check_in_worker, list(argv), i, measure) for i in todo]
        for future in as_completed(futures):
            i, fields = future.result()
            fields["tensors"] = [TensorReport(**t) for t in fields["tensors"]]
            outcomes[i] = Outcome(variants[i], **fields)
            done(variants[i])


def write_plot(cases: list[Case], path: str) -> dict[str, Any]:
    """Plot each case's serialised schedule at its largest step count, one panel per io_mode.

    Returns what the report records of it: the path and, per panel, the case, io_mode, steps and variant drawn.
    """
    from popxl_addons.harness.plot import plot_schedules
    from popxl_addons.harness.programs import serialised_program
    from popxl_addons.harness.schedule import schedule

    panels = {}
    drawn = []
    for case in cases:
        steps = max(case.steps)
        for mode in case.io_modes:
            variant = Variant(case, mode, steps, 1, case.stores[0], case.loads[0], case.layouts[0])
            if variant.skip_reason is not None:
                continue
            program = serialised_program(variant)
            assert program.serialised is not None and program.compute is not None
            loops = {"forward": schedule(program.serialised, program.compute)}
            if program.serialised_grad is not None and program.compute_grad is not None:
                loops["backward"] = schedule(program.serialised_grad, program.compute_grad)
            panels[(f"{case.name}, {steps} steps", mode)] = loops
            drawn.append({"case": case.name, "io_mode": mode, "steps": steps, "variant": variant.id})
    plot_schedules(panels, path)
    return {"path": path, "panels": drawn}


def _console() -> Console:
    # A pipe or a log has no width: LOG_COLUMNS, unless COLUMNS says otherwise.
    return Console(width=None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", str(LOG_COLUMNS))))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the harness; returns 1 when any variant fails or errs, 2 for bad input."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["plan"]:
        return plan_cli.main(argv[1:])
    console = _console()
    args = parser().parse_args(argv)
    try:
        cases = select_cases(args)
    except UsageError as e:
        print(fit(f"popxl-addons-harness: error: {e}"), file=sys.stderr)
        return 2
    replicas = max(layout.replication for c in cases for layout in c.layouts)
    # One CPU device per replica, for this process and the workers (before JAX starts its backends).
    os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={max(replicas, 1)}")
    # A module that cannot be built fails every variant alike: it is tried once and reported once.
    broken = {c.name: error for c in cases if (error := build_error(c)) is not None}
    variants = [v for c in cases for v in c.variants()]
    skipped = sum(v.skip_reason is not None for v in variants)
    say(console, f"{len(variants)} variants of {len(cases)} case(s) ({skipped} skipped), {args.jobs} worker(s)")
    large = [v for v in variants if v.skip_reason is None and micro_batches(v) > LARGE_MICRO_BATCHES]
    if large:
        most = max(micro_batches(v) for v in large)
        say(
            console,
            f"{len(large)} variant(s) of more than {LARGE_MICRO_BATCHES} micro-batches (up to {most}): each "
            "unrolled reference takes minutes to build and compile; progress counts variants as they finish",
        )
    outcomes = run_all(argv, variants, args.jobs, not args.no_measure, progress_console(), broken)
    from popxl_addons.harness import report

    built = [o for o in outcomes if o.variant.case.name not in broken]
    shown = report.table(built, console.width)
    console.print(shown)
    if (figures := report.figures_table(built, shown, console.width)) is not None:
        console.print(figures)
    for name, error in broken.items():
        last = [line for line in error.strip().splitlines() if line.strip()][-1].strip()
        count = sum(v.case.name == name for v in variants)
        # The error on a line of its own, so that it wraps least.
        say(console, f"case {name}: the module cannot be built ({count} variant(s) not run):\n  {last}")
    for line in [*report.skipped_lines(outcomes), *report.repeated_warnings(outcomes)]:
        say(console, line)
    for o in outcomes:
        if o.verdict == "FAIL":
            say(console, o.report())
    console.print(report.case_summary(outcomes))
    for path in (args.json, args.html, args.plot):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    # The plot first, so that the JSON names it and the HTML shows it.
    plotted = None
    if args.plot:
        try:
            plotted = write_plot(cases, args.plot)
            say(console, f"schedule plot written to {args.plot}")
        except Exception as e:  # the results stand without it; a picture that cannot be drawn is said once
            say(console, f"no schedule plot: {type(e).__name__}: {e}")
    if args.json:
        report.write_json(outcomes, args.json, plotted)
    if args.html:
        report.write_html(outcomes, args.html, plotted)
    errors = [o for o in outcomes if o.verdict == "ERROR"]
    if errors:
        where = f" (tracebacks in {args.json or args.html})" if args.json or args.html else " (--json keeps tracebacks)"
        say(console, f"{len(errors)} variant(s) could not be built or run{where}")
    failed = [o for o in outcomes if o.verdict in ("FAIL", "ERROR")]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
