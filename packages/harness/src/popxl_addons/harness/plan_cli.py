"""`popxl-addons-harness plan`: a batch-serialisation plan for a device-memory budget, and its evidence."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence

import popxl
from popxl_addons.core import IO_MODES, SerialisationPlan, plan_batch_serialisation
from popxl_addons.harness import cli_shared
from popxl_addons.harness.cases import Case
from popxl_addons.harness.equivalence import check

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_bytes(text: str) -> int:
    """Bytes from `2GiB`, `512MB`, `1.5 GiB` or a plain number of bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"--budget takes a size such as 2GiB, 512MB or 1000000, got {text!r}")
    return int(float(match.group(1)) * _UNITS[unit])


def _batch(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--global-batch takes a positive integer, got {text!r}")
    return int(text)


def parser() -> argparse.ArgumentParser:
    """The `plan` command line."""
    p = cli_shared.ArgumentParser(
        prog="popxl-addons-harness plan",
        description="Choose steps, io_mode and each activation's place (host, recompute or keep) so that one "
        "forward-and-gradient pass over the global batch fits a device-memory budget; print the plan and why.",
        formatter_class=cli_shared.help_formatter(argparse.HelpFormatter),
    )
    p.add_argument("target", metavar="MODULE:ATTR", help="a popxl_addons Module class or a function returning one")
    p.add_argument(
        "--input-shape",
        type=cli_shared.positive_ints("--input-shape"),
        required=True,
        help="shape of one sample of the module's input, without the batch axis, e.g. 128",
    )
    p.add_argument("--global-batch", type=_batch, required=True, help="samples per pass, e.g. 64")
    p.add_argument("--budget", type=parse_bytes, required=True, help="device memory, e.g. 2GiB")
    p.add_argument(
        "--kwargs", type=cli_shared.constructor_kwargs, default={}, help="constructor arguments as a JSON object"
    )
    p.add_argument(
        "--steps", type=cli_shared.positive_ints("--steps"), help="step counts to consider (default: divisors)"
    )
    p.add_argument(
        "--io-modes",
        type=cli_shared.subset("--io-modes", IO_MODES),
        default=IO_MODES,
        help=f"io_modes to consider, a subset of {','.join(IO_MODES)} (default: all)",
    )
    p.add_argument("--check", action="store_true", help="run the normal-vs-serialised equivalence on the plan")
    return p


class _Progress:
    """Planner stages on standard error; in a log, at most one line every PROGRESS_SECONDS."""

    def __init__(self) -> None:
        self.console = cli_shared.progress_console()
        self.start = time.monotonic()
        self.last = -cli_shared.PROGRESS_SECONDS

    def __call__(self, stage: str) -> None:
        now = time.monotonic()
        if not self.console.is_terminal and now - self.last < cli_shared.PROGRESS_SECONDS:
            return
        line = cli_shared.progress_line(f"[plan] {now - self.start:.0f} s", stage)
        self.console.print(line, markup=False, highlight=False)
        self.last = now


def _check(plan: SerialisationPlan, args: argparse.Namespace, micro_shape: tuple[int, ...]) -> bool:
    factory = cli_shared.load_target(args.target)
    case = Case(
        args.target.partition(":")[2],
        lambda layout: cli_shared.build_module(factory, dict(args.kwargs), args.target),
        micro_shape,
        grad=True,
        io_modes=(plan.io_mode,),
        steps=(plan.steps,),
        rows=(1,),
        remote_memories=("host",),
        policy=tuple(sorted(plan.policy.items())),
        planner_step=True,
        rtol=1e-4,
        atol=1e-4,
    )
    outcome = check(case.variants()[0])
    print(cli_shared.fit(outcome.report()))
    return outcome.passed


def main(argv: Sequence[str]) -> int:
    """Plan (and with --check, verify); returns 1 when nothing fits or the check fails, 2 for bad input."""
    args = parser().parse_args(list(argv))
    batch = args.global_batch
    try:
        factory = cli_shared.load_target(args.target)
    except cli_shared.UsageError as e:
        print(cli_shared.fit(f"popxl-addons-harness plan: error: {e}"), file=sys.stderr)
        return 2
    spec = popxl.TensorSpec((batch, *args.input_shape), popxl.float32)
    try:
        plan = plan_batch_serialisation(
            lambda: cli_shared.build_module(factory, dict(args.kwargs), args.target),
            spec,
            args.budget,
            io_modes=args.io_modes,
            steps_choices=args.steps,
            progress=_Progress(),
        )
    except (ValueError, popxl.OutOfMemoryError) as e:
        print(cli_shared.fit(f"no plan: {e}"))
        return 1
    print(cli_shared.fit(plan.explain()))
    if args.check:
        return 0 if _check(plan, args, (batch // plan.steps, *args.input_shape)) else 1
    return 0
