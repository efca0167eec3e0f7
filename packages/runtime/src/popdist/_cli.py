"""poprun's command line: its options, their checks, and the launch they describe."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from popdist import _control, _env, _hosts, _mpi, _wire

# PopRun's options for IPU fabrics: accepted so that command lines written for PopRun run, and without
# effect here (no IPU partition is involved).
NO_EFFECT_OPTIONS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--num-ilds",), "the number of IPU-Link domains"),
    (("--vipu-server-host",), "the V-IPU server's host"),
    (("--vipu-server-port",), "the V-IPU server's port"),
    (("--vipu-server-timeout",), "the V-IPU server's request timeout"),
    (("--vipu-partition",), "the V-IPU partition to create or use"),
    (("--vipu-partition-attempts",), "attempts to bind the partition"),
    (("--vipu-cluster",), "the V-IPU cluster of a new partition"),
    (("--vipu-allocation",), "the V-IPU allocation of a new partition"),
    (("--update-partition",), "whether to update the partition"),
    (("--reset-partition",), "whether to reset the partition"),
    (("--remove-partition",), "whether to remove the partition afterwards"),
    (("--executable-cache-path",), "a Poplar executable cache"),
    (("--numa-aware",), "NUMA binding of the instances"),
    (("--offline-mode",), "running without IPUs"),
)
# PopRun's options for mpirun: passed to it when poprun starts the instances through it, else without effect.
MPI_OPTIONS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--mpi-global-args",), "options for mpirun"),
    (("--mpi-local-args",), "more options for mpirun (PopRun's per-instance options)"),
)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _index(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _yes_no(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("yes", "true", "on", "1"):
        return True
    if lowered in ("no", "false", "off", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected yes or no, got {text!r}")


def dest(flags: tuple[str, ...]) -> str:
    """The attribute of the parsed options that holds the option named by `flags`."""
    return flags[-1].lstrip("-").replace("-", "_")


def _add_poprun_options(parser: argparse.ArgumentParser) -> None:
    """PopRun's own options for the instances, the replicas and what poprun shows."""
    parser.add_argument(
        "--num-instances", type=_positive, default=None, help="the number of instances (default: one per host)"
    )
    parser.add_argument(
        "--num-replicas",
        type=_positive,
        default=None,
        help="the total number of replicas, divided evenly among the instances (default: one per instance)",
    )
    parser.add_argument(
        "--ipus-per-replica",
        type=_positive,
        default=1,
        help="the IPUs per replica (default 1): passed on to popdist; each replica runs on one device here",
    )
    parser.add_argument(
        "--only-output-from-instance",
        type=_index,
        default=None,
        metavar="N",
        help="show only instance N's output (a failing instance's last lines are still shown)",
    )
    parser.add_argument(
        "--print-topology",
        type=_yes_no,
        default=False,
        metavar="yes|no",
        help="print which instance runs which replicas",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="say what poprun does (-vv: also each instance's environment)",
    )


def _add_own_options(parser: argparse.ArgumentParser) -> None:
    """This poprun's options that PopRun does not have: devices, the joining timeout, MPI or not."""
    ours = parser.add_argument_group("options of this poprun (not PopRun's)")
    ours.add_argument(
        "--devices",
        choices=("auto", "cpu", "gpu"),
        default="auto",
        help="run the replicas on CPU devices, or one GPU each; auto (the default) picks GPUs when JAX_PLATFORMS "
        "does not say cpu and there are enough of them",
    )
    ours.add_argument(
        "--init-timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help=f"how long popdist.init() waits for the coordinator and the other instances (sets {_env.INIT_TIMEOUT}; "
        f"default: {_env.INIT_TIMEOUT} if set, else {_env.DEFAULT_INIT_TIMEOUT:g})",
    )
    ours.add_argument(
        "--mpi",
        choices=_mpi.MODES,
        default=None,
        help="start the instances through Open MPI's mpirun, so that they are the ranks of one MPI job: on, off, "
        f"or auto (the default; {_mpi.MODE_VARIABLE} sets another): when mpirun is on PATH and the launch is on "
        "one host",
    )


def _add_host_options(parser: argparse.ArgumentParser) -> None:
    """The options that place this poprun among the hosts of a launch."""
    hosts = parser.add_argument_group(
        "hosts: run one poprun on each host; each starts its share of the instances (PopRun's -H and --hostfile, "
        "and this poprun's own options); unset, they come from SLURM or Open MPI when poprun runs under them"
    )
    listed = hosts.add_mutually_exclusive_group()
    listed.add_argument(
        "-H",
        "--host",
        metavar="LIST",
        default=None,
        help="the hosts, host 0 first: a comma-separated list, with ranges as in host[0-2,4]; the instances are "
        "divided evenly among them, and host 0's poprun listens at the first one",
    )
    listed.add_argument("--hostfile", metavar="FILE", default=None, help="a file listing the hosts, one a line")
    hosts.add_argument("--num-hosts", type=_positive, default=None, metavar="N", help="the number of hosts")
    hosts.add_argument(
        "--host-index",
        type=_index,
        default=None,
        metavar="I",
        help="which host this is (default: the cluster's task rank, or this machine's place in --host)",
    )
    hosts.add_argument(
        "--coordinator-address",
        default=None,
        metavar="HOST:PORT",
        help="where host 0's poprun listens for the others (default: the first host of --host at port "
        f"{_hosts.PORT_VARIABLE} or {_hosts.DEFAULT_PORT}; under SLURM or Open MPI, where JAX would put its "
        "coordinator)",
    )
    hosts.add_argument(
        "--new-secret",
        action="store_true",
        help=f"print a fresh secret for {_control.SECRET_VARIABLE} and exit: every host's poprun of a launch must be "
        "given the same one, with which they prove to each other that they belong to the launch",
    )
    hosts.add_argument(
        "--cluster",
        choices=_hosts.CLUSTERS,
        default="auto",
        help="the cluster environment to read the hosts from (default auto: Open MPI or SLURM when present)",
    )


def _add_passed_options(parser: argparse.ArgumentParser) -> None:
    """PopRun's options for mpirun and for IPU fabrics, which poprun takes and passes on or ignores."""
    mpi = parser.add_argument_group("PopRun's MPI options: passed to mpirun when the instances start through it")
    for flags, what in MPI_OPTIONS:
        mpi.add_argument(*flags, dest=dest(flags), default=None, metavar="ARGS", help=what)
    ignored = parser.add_argument_group("PopRun's IPU options: accepted, no effect here")
    for flags, what in NO_EFFECT_OPTIONS:
        ignored.add_argument(*flags, dest=dest(flags), default=None, metavar="ARG", help=what)


def build_parser() -> argparse.ArgumentParser:
    """poprun's command line."""
    parser = argparse.ArgumentParser(
        prog="poprun",
        usage="poprun [options] program [args]",
        description="Run a popxl program as several instances (processes) on this host, as Graphcore's PopRun "
        "does; the program reads its place with popdist and joins the others with popdist.init().",
        epilog="Put `--` before the program if its name starts with '-'.",
    )
    _add_poprun_options(parser)
    _add_own_options(parser)
    _add_host_options(parser)
    _add_passed_options(parser)
    parser.add_argument("program", nargs=argparse.REMAINDER, help="the program and its arguments")
    return parser


@dataclass(frozen=True)
class Launch:
    """The whole launch, and this host's share: instances `first`..`first + per_host - 1`."""

    num_instances: int
    num_replicas: int
    ipus_per_replica: int
    place: _hosts.HostPlace
    # The secret the hosts' poprun prove to each other (None on one host); never shown.
    secret: bytes | None = field(default=None, repr=False)

    @property
    def local(self) -> int:
        """Replicas per instance."""
        return self.num_replicas // self.num_instances

    @property
    def per_host(self) -> int:
        """Instances per host."""
        return self.num_instances // self.place.num_hosts

    @property
    def first(self) -> int:
        """The global index of this host's first instance."""
        return self.place.host_index * self.per_host

    def agreement(self) -> _wire.Message:
        """What every host's poprun must have been given alike."""
        return {
            "num_hosts": self.place.num_hosts,
            "num_instances": self.num_instances,
            "num_replicas": self.num_replicas,
            "ipus_per_replica": self.ipus_per_replica,
        }


def topology(launch: Launch) -> str:
    """The table `--print-topology yes` prints: which host and instance hold which replicas."""
    local = launch.local
    rows: list[tuple[str, list[str]]] = []
    if launch.place.num_hosts > 1:
        rows.append(("hosts", [str(i // launch.per_host) for i in range(launch.num_instances)]))
    rows.append(("instances", [str(i) for i in range(launch.num_instances)]))
    rows.append(
        (
            "replicas",
            [
                f"{i * local}" if local == 1 else f"{i * local}-{(i + 1) * local - 1}"
                for i in range(launch.num_instances)
            ],
        )
    )
    widths = [max(len(cells[i]) for _, cells in rows) for i in range(launch.num_instances)]
    return "\n".join(
        f"{name:<9} | " + " | ".join(c.center(w) for c, w in zip(cells, widths)) + " |" for name, cells in rows
    )


@dataclass(frozen=True)
class MpiChoice:
    """Whether the instances start through mpirun: `mpirun`, or None and `reason`."""

    mpirun: _mpi.Mpirun | None
    reason: str


def _choose_mpi(parser: argparse.ArgumentParser, asked: str | None, num_hosts: int) -> MpiChoice:
    """--mpi, else POPRUN_MPI, else auto, for this launch; a usage error where `on` cannot be."""
    said = f"--mpi {asked}"
    if asked is None:
        variable = os.environ.get(_mpi.MODE_VARIABLE, "").strip().lower()
        if variable and variable not in _mpi.MODES:
            parser.error(f"{_mpi.MODE_VARIABLE}={variable!r} is none of {', '.join(_mpi.MODES)}")
        asked = variable or "auto"
        said = f"{_mpi.MODE_VARIABLE}={asked}"
    try:
        return MpiChoice(*_mpi.decide(asked, said, num_hosts))
    except ValueError as e:
        parser.error(str(e))


def parse(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> tuple[argparse.Namespace, list[str], Launch, MpiChoice]:
    """The options, the program, the launch and whether it uses MPI; exits with a usage error for a bad command
    line."""
    args = parser.parse_args(argv)
    if args.new_secret:
        print(_control.new_secret())
        raise SystemExit(0)
    program: list[str] = list(args.program)
    if program and program[0] == "--":
        program = program[1:]
    if not program:
        parser.error("no program given (usage: poprun [options] program [args])")
    try:
        listed = _hosts.expand_hosts(args.host) if args.host is not None else None
        if args.hostfile is not None:
            listed = _hosts.read_hostfile(args.hostfile)
        place = _hosts.resolve(listed, args.num_hosts, args.host_index, args.coordinator_address, args.cluster)
        if args.init_timeout is None:
            _env.read_timeout()  # a bad POPDIST_INIT_TIMEOUT is a usage error here, not in every instance
        secret = _control.read_secret() if place.num_hosts > 1 else None
    except ValueError as e:
        parser.error(str(e))
    if args.num_instances is None:
        args.num_instances = place.num_hosts
    if args.num_replicas is None:
        args.num_replicas = args.num_instances
    if args.num_replicas % args.num_instances:
        parser.error(f"--num-replicas {args.num_replicas} is not a multiple of --num-instances {args.num_instances}")
    if args.only_output_from_instance is not None and args.only_output_from_instance >= args.num_instances:
        parser.error(f"--only-output-from-instance {args.only_output_from_instance} names no instance")
    if args.num_instances % place.num_hosts:
        parser.error(
            f"--num-instances {args.num_instances} cannot be divided evenly among {place.num_hosts} hosts "
            f"(from {place.source})"
        )
    mpi = _choose_mpi(parser, args.mpi, place.num_hosts)
    if place.num_hosts > 1 and secret is None:
        parser.error(
            f"a launch over {place.num_hosts} hosts needs a secret that its hosts share: set "
            f"{_control.SECRET_VARIABLE} to the same value for every host's poprun (`export "
            f"{_control.SECRET_VARIABLE}=$(poprun --new-secret)` where they are started from)"
        )
    launch = Launch(args.num_instances, args.num_replicas, args.ipus_per_replica, place, secret)
    return args, program, launch, mpi
