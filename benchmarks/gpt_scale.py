"""The phased GPT of examples/gpt_phased.py at real sizes, beside the same model written in JAX, and the largest
model this machine trains phased.

Sizes (layers x width, heads): GPT-2 small 12 x 768 (12), medium 24 x 1024 (16), large 36 x 1280 (20) and
xl 48 x 1600 (25), GPT-3 2.7b 32 x 2560 (32) and 6.7b 32 x 4096 (32); vocabulary 50304, one sequence per
micro-batch, one replica. The example's model does not tie its output projection to the token embedding, so
each size has vocabulary x width more parameters than GPT's (163M at GPT-2 small). For each dtype, the sizes
run in the order given; the sweep stops at the first size the phased program cannot hold
(`popxl.OutOfMemoryError`, which the runtime raises before the OS would kill the process), and the largest
size that trained is reported.

Each program runs in its own subprocess, so that its peak resident memory (the child's `ru_maxrss`) is its
own. Per size and dtype:

- phased: the example's phased program (weights, gradients and Adam state in remote buffers, one layer's
  phases looped over the layers; `checks=False`, as benchmarks/gpt_phased.py runs it). Start-up is split
  into build (the program and its variables' initial values), attach (the Session and its state), compile
  (XLA, measured by `memory_analysis`, which compiles the step a run then uses) and the first step.
- jax: the same model in JAX (benchmarks/gpt_jax.py: its layers a `lax.scan` over stacked weights, the
  micro-batches a scan accumulating the gradient, then the clipped Adam; one jitted step, weights and Adam
  state donated and updated in place). Start-up: compile (from shapes), build (weights made on the device)
  and the first step. A step that would not fit the memory available is not run.

Reported: parameters; state bytes (weights, gradients, Adam moments); the program's device and host bytes
(XLA's figures: arguments and outputs where they live, less what is updated in place, plus temporaries);
the peak resident memory of the process; start-up; the median time of `--steps` further steps; the losses.
The phased program's build draws its weights on the host before anything can check the machine's memory, so
a size whose weights and Adam state exceed the host memory available is refused before building, and counts
as not fitting.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common import add_out_option, machine_matmul_rate, matmul_flops, save
from disk_figures import disk_bandwidth, io_counters, plot_timeline, tier_bytes, timeline, write_trace

SIZES: dict[str, tuple[int, int, int]] = {  # layers, width, heads
    "tiny": (2, 64, 2),
    "small": (12, 768, 12),
    "medium": (24, 1024, 16),
    "large": (36, 1280, 20),
    "xl": (48, 1600, 25),
    "2.7b": (32, 2560, 32),
    "6.7b": (32, 4096, 32),
}
PROGRAMS = ("device", "phased", "disk", "jax")
# The phased programs by where their state lives: the device's own memory ("device"; on a CPU the same RAM),
# pinned host memory ("phased") or files on local disk ("disk").
TIERS = ("device", "phased", "disk")
STAGES = ("build", "attach", "compile", "first_step")


@dataclass(frozen=True)
class Spec:
    """One program at one size: what a child process measures."""

    program: str
    size: str
    dtype: str
    vocab: int
    sequence: int
    micro_batches: int
    steps: int
    device: str
    # The disk tier's folder, for the "disk" program: the phased program with its state on disk.
    remote_dir: str = ""

    @property
    def shape(self) -> tuple[int, int, int]:
        return SIZES[self.size]


def _config(spec: Spec) -> Any:
    from gpt_model import Config

    layers, width, heads = spec.shape
    return Config(
        vocab=spec.vocab,
        width=width,
        heads=heads,
        layers=layers,
        sequence=spec.sequence,
        tp=1,
        dp=1,
        micro=1,
        steps=spec.micro_batches,
        float16=spec.dtype == "float16",
        init_std=0.02,
    )


def _data(spec: Spec) -> tuple[Any, Any]:
    """Random (micro-batches, 1, sequence) tokens and their (micro-batches, sequence) next tokens."""
    import numpy as np

    rng = np.random.default_rng(0)
    data = rng.integers(0, spec.vocab, (spec.micro_batches, 1, spec.sequence + 1)).astype(np.int32)
    return data[..., :-1], data[..., 1:].reshape(spec.micro_batches, -1)


class Stopwatch:
    """Seconds per named stage, and the stage under way (where a failure happened)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.seconds: dict[str, float] = {}
        self.stage = ""

    def time(self, stage: str, fn: Callable[[], Any]) -> Any:
        """Run `fn` as `stage`, recording its seconds."""
        self.stage = stage
        begin = time.perf_counter()
        result = fn()
        self.seconds[stage] = time.perf_counter() - begin
        print(f"{self.label}: {stage} {self.seconds[stage]:.1f} s", file=sys.stderr, flush=True)
        return result


def _steps(run: Callable[[], float], count: int, watch: Stopwatch) -> tuple[list[float], float]:
    """The first step's loss and `count` more, and the median seconds of those."""
    losses = [watch.time("first_step", run)]
    watch.stage = "step"
    seconds = []
    for _ in range(count):
        begin = time.perf_counter()
        losses.append(run())
        seconds.append(time.perf_counter() - begin)
    return losses, statistics.median(seconds) if seconds else float("nan")


def phased_child(spec: Spec, watch: Stopwatch) -> dict[str, Any]:
    """Build, attach, compile and run the phased program; its figures."""
    import numpy as np
    from gpt_jax import parameters
    from gpt_model import phased_program

    import popxl
    from popxl.memory import host_available
    from popxl.units import format_bytes

    config = _config(spec)
    itemsize = config.dtype.as_numpy().itemsize
    on_disk = spec.program == "disk"
    # Building makes every weight's and Adam moment's initial value on the host (the moments' second in
    # float32); no Session is there yet to check that the machine holds them. With the state on disk, only
    # the weights: the moments' zeros are never in memory, and are not written to the files either.
    building = parameters(config) * (itemsize if on_disk else 2 * itemsize + 4)
    available = host_available()
    if available is not None and building > available:
        watch.stage = "build"
        raise popxl.OutOfMemoryError(
            f"Building would make {format_bytes(building)} of initial values on the host, which has "
            f"{format_bytes(available)} available. Nothing was built."
        )
    ir, streams, stages = watch.time("build", lambda: phased_program(config))
    state = {
        "weights": sum(s.weights.host_bytes() for s in stages),
        "gradients": sum(s.grads.host_bytes() for s in stages),
        "adam": sum(s.adam.host_bytes() for s in stages),
    }
    folder = spec.remote_dir if on_disk else None
    os.environ.pop("POPXL_REMOTE_DIR", None)  # the state in memory means in memory
    memory_kind = "device" if spec.program == "device" else None
    session = watch.time(
        "attach",
        lambda: popxl.Session(ir, spec.device, checks=False, remote_memory=memory_kind, remote_dir=folder).__enter__(),
    )
    tokens, labels = _data(spec)
    feeds = {
        streams["tokens"]: tokens.reshape(session.host_layout.shape(streams["tokens"].shape)),
        streams["labels"]: labels.reshape(session.host_layout.shape(streams["labels"].shape)),
    }
    memory = watch.time("compile", lambda: session.memory_analysis(feeds))
    events = session.record_remote_io() if on_disk else []
    span: list[float] = []

    def run() -> float:
        events.clear()  # the timeline is the last step's
        span[:] = [time.perf_counter()]
        loss = float(np.mean(session.run(feeds)[streams["loss"]]))
        span.append(time.perf_counter())
        return loss

    first = io_counters()
    losses, step = _steps(run, spec.steps, watch)
    moved = {k: (v - first[k]) / (spec.steps + 1) for k, v in io_counters().items()}
    session.__exit__(None, None, None)
    figures: dict[str, Any] = {
        "parameters": parameters(config),
        "state_bytes": state,
        "memory": memory,
        "losses": losses,
        "step_s": step,
        "flops_per_step": matmul_flops(config.layers, config.width, config.sequence, config.vocab, _tokens(spec)),
        "os_bytes_per_step": moved,
    }
    if on_disk and len(span) == 2:
        figures["tier_bytes_last_step"] = tier_bytes([list(e) for e in events])
        lanes = timeline([list(e) for e in events], span[0], span[1])
        name = f"gpt_scale_timeline_{spec.size}_{spec.dtype}"
        write_trace(lanes, Path(spec.remote_dir).parent / f"{name}.json")
        title = f"One step of the phased GPT at {spec.size} widths, {spec.dtype}, state on disk"
        plot_timeline(lanes, title, Path(spec.remote_dir).parent / f"{name}.png")
        figures["timeline"] = name
    return figures


def _tokens(spec: Spec) -> int:
    return spec.micro_batches * spec.sequence


def jax_child(spec: Spec, watch: Stopwatch) -> dict[str, Any]:
    """Compile, build and run the JAX model's step; its figures."""
    import jax
    import jax.numpy as jnp
    from gpt_jax import adam_state, init_stacked, parameters, train_step

    import popxl
    from popxl.memory import device_available, host_available, memory_figures
    from popxl.units import format_bytes

    config = _config(spec)
    dtype = config.dtype.as_numpy()
    device = jax.devices(spec.device)[0]
    sharding = jax.sharding.SingleDeviceSharding(device)
    tokens, labels = _data(spec)
    key = jax.random.key(0)

    def make() -> tuple[Any, Any]:
        params = init_stacked(key, config, dtype)
        return params, adam_state(params, dtype)

    def placed(tree: Any) -> Any:
        return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), tree)  # type: ignore[no-untyped-call]

    shapes = placed((*jax.eval_shape(make), tokens, labels))
    jitted = jax.jit(lambda p, a, t, y: train_step(p, a, t, y, config), donate_argnums=(0, 1))
    compiled = watch.time("compile", lambda: jitted.lower(*shapes).compile())
    memory = memory_figures(compiled, shapes)
    on_device = device_available(device)
    needed, available = (
        (memory["device_bytes"], on_device)
        if on_device is not None
        else (memory["device_bytes"] + memory["host_bytes"], host_available())
    )
    if available is not None and needed > available:
        watch.stage = "build"
        raise popxl.OutOfMemoryError(
            f"The JAX step would hold {format_bytes(needed)}, but {format_bytes(available)} is available. "
            "Nothing was run."
        )
    with jax.default_device(device):
        params, adam = watch.time("build", lambda: jax.block_until_ready(jax.jit(make)()))  # type: ignore[no-untyped-call]
        batch = jax.device_put((jnp.asarray(tokens), jnp.asarray(labels)), device)
    held = [params, adam]

    def run() -> float:
        held[0], held[1], loss = compiled(held[0], held[1], *batch)
        return float(loss)

    losses, step = _steps(run, spec.steps, watch)
    itemsize = jnp.dtype(dtype).itemsize
    state = {
        "weights": parameters(config) * itemsize,
        "gradients": parameters(config) * itemsize,  # the step's accumulated gradient, a temporary
        "adam": sum(leaf.nbytes for leaf in jax.tree.leaves(held[1])),
    }
    return {"parameters": parameters(config), "state_bytes": state, "memory": memory, "losses": losses, "step_s": step}


def child(spec: Spec) -> None:
    """Measure one program at one size; print its figures as the last line of standard output."""
    import popxl
    from popxl.errors import RemoteFileError

    # Should the OS have to end a process for memory after all, let it be this one rather than a neighbour's.
    with contextlib.suppress(OSError):
        Path("/proc/self/oom_score_adj").write_text("1000")
    watch = Stopwatch(f"{spec.program} {spec.size} {spec.dtype}")
    try:
        figures = (jax_child if spec.program == "jax" else phased_child)(spec, watch)
        result = {"outcome": "trained", **figures}
    except popxl.OutOfMemoryError as e:
        result = {"outcome": "out_of_memory", "stage": watch.stage, "error": str(e)}
    except RemoteFileError as e:  # the disk tier's folder too small: refused before anything was written
        result = {"outcome": "out_of_disk", "stage": watch.stage, "error": str(e)}
    result["seconds"] = watch.seconds
    print(json.dumps(result))


def run_child(spec: Spec) -> dict[str, Any]:
    """Run `spec` in a subprocess: its figures with the subprocess's peak resident memory."""
    command = [sys.executable, __file__, "--child", json.dumps(asdict(spec))]
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(command, stdout=out, text=True)  # progress and errors on our stderr
        # wait4 gives this child's own resource usage (RUSAGE_CHILDREN would take the largest of them all).
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        lines = out.read().splitlines()
    result: dict[str, Any] = {"program": spec.program, "size": spec.size, "dtype": spec.dtype}
    if process.returncode == 0 and lines:
        result.update(json.loads(lines[-1]))
    elif process.returncode < 0:
        # Killed by a signal: SIGKILL is how the OS ends a process that runs the machine out of memory.
        result.update(outcome="killed", error=f"killed by signal {-process.returncode}")
    else:
        result.update(outcome="failed", error=f"exit status {process.returncode}")
    result["peak_rss_bytes"] = usage.ru_maxrss * 1024
    return result


Figures = dict[str, Any]


def sweep(
    specs: dict[str, list[Spec]],
    run: Callable[[Spec], Figures],
    tiers: tuple[str, ...] = ("phased",),
    jax: bool = True,
) -> tuple[list[Figures], dict[str, Any]]:
    """Run each dtype's sizes in order, each phased program of `tiers` (its state in memory, on disk) and then
    JAX (unless not `jax`), until no tier trains a size.

    Returns every run's figures and, per dtype, the largest size trained phased and the first that was not.
    """
    runs: list[dict[str, Any]] = []
    largest: dict[str, Any] = {}
    for dtype, phased in specs.items():
        largest[dtype] = {"trained": None, "parameters": None, "stopped_at": None, "reason": None}
        for spec in phased:
            results = [run(Spec(**{**asdict(spec), "program": tier})) for tier in tiers]
            runs.extend(results)
            trained = [r for r in results if r["outcome"] == "trained"]
            if not trained:
                largest[dtype].update(stopped_at=spec.size, reason=results[-1].get("error", results[-1]["outcome"]))
                break
            largest[dtype].update(trained=spec.size, parameters=trained[0]["parameters"])
            if jax:
                runs.append(run(Spec(**{**asdict(spec), "program": "jax"})))
    return runs, largest


def _bytes(n: float | None) -> str:
    from popxl.units import format_bytes

    return "-" if n is None else format_bytes(n)


def _table(runs: list[dict[str, Any]]) -> list[str]:
    header = (
        f"{'size':7s} {'dtype':8s} {'program':7s} {'params':>8s} {'state':>10s} {'device':>10s} {'host':>10s} "
        f"{'peak RSS':>10s} {'build':>7s} {'attach':>7s} {'compile':>8s} {'1st step':>8s} {'step':>8s}  first loss"
    )
    lines = [header]
    for r in runs:
        start = f"{r['size']:7s} {r['dtype']:8s} {r['program']:7s}"
        if r["outcome"] != "trained":
            where = f" at {r['stage']}" if r.get("stage") else ""
            message = " ".join(str(r.get("error", "")).split("Largest buffers:")[0].split())  # its first paragraph
            lines.append(f"{start} {r['outcome']}{where}, peak RSS {_bytes(r['peak_rss_bytes'])}: {message}")
            continue
        seconds = r["seconds"]
        times = " ".join(
            f"{seconds[s]:{w}.1f}" if s in seconds else f"{'-':>{w}s}" for s, w in zip(STAGES, (7, 7, 8, 8))
        )
        lines.append(
            f"{start} {r['parameters'] / 1e6:7.1f}M {_bytes(sum(r['state_bytes'].values())):>10s} "
            f"{_bytes(r['memory']['device_bytes']):>10s} {_bytes(r['memory']['host_bytes']):>10s} "
            f"{_bytes(r['peak_rss_bytes']):>10s} {times} {r['step_s']:8.3f}  {r['losses'][0]:.4f}"
        )
    return lines


def _disk_table(runs: list[dict[str, Any]], machine: dict[str, Any]) -> list[str]:
    """The disk tier's figures per trained phased run: what the program loaded from disk and what the OS read
    and wrote per step, the disk's bandwidth reached, and matmul FLOP/s against this machine's peak (both
    measured in this run)."""
    disk = machine.get("disk") or {}
    header = (
        f"{'size':7s} {'dtype':8s} {'program':7s} {'step':>8s} {'loaded':>10s} {'OS read':>10s} {'of loaded':>9s} "
        f"{'written':>10s} {'read GB/s':>9s} {'write GB/s':>10s} {'disk busy':>9s} {'GFLOP/s':>8s} {'of peak':>7s}"
    )
    lines = [header]
    for r in runs:
        if r["outcome"] != "trained" or r["program"] == "jax":
            continue
        moved, step = r["os_bytes_per_step"], r["step_s"]
        loaded = r.get("tier_bytes_last_step", {}).get("load", 0)
        busy = (
            (moved["read_bytes"] / disk["read_bytes_per_s"] + moved["write_bytes"] / disk["write_bytes_per_s"]) / step
            if disk
            else float("nan")
        )
        rate = r["flops_per_step"] / step
        peak = machine["matmul_flops_per_s"].get(r["dtype"], float("nan"))
        share = f"{moved['read_bytes'] / loaded:9.0%}" if loaded else f"{'-':>9s}"
        lines.append(
            f"{r['size']:7s} {r['dtype']:8s} {r['program']:7s} {step:8.2f} {_bytes(loaded):>10s} "
            f"{_bytes(moved['read_bytes']):>10s} {share} {_bytes(moved['write_bytes']):>10s} "
            f"{moved['read_bytes'] / step / 1e9:9.2f} {moved['write_bytes'] / step / 1e9:10.2f} {busy:9.0%} "
            f"{rate / 1e9:8.1f} {rate / peak:7.1%}"
        )
    return lines


def _machine(args: argparse.Namespace, dtypes: list[str], remote: Path) -> dict[str, Any]:
    """This machine's own limits, measured in this run: matmul FLOP/s per dtype, and the disk tier folder's
    sequential bandwidth."""
    import jax
    import numpy as np

    device = jax.devices(args.device)[0]
    rates = {d: machine_matmul_rate(device, np.dtype(d), args.matmul_size) for d in dtypes}
    disk = disk_bandwidth(remote, args.probe_bytes) if "disk" in args.tiers.split(",") else None
    return {"matmul_flops_per_s": rates, "matmul_size": args.matmul_size, "disk": disk, "remote_dir": str(remote)}


def main() -> None:
    """Run the sweep, print the tables and the largest model trained phased, and save the figures."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", help=f"sizes in order, from {', '.join(SIZES)} (default: small,medium,large)")
    p.add_argument("--dtypes", default="float32,float16", help="dtypes, each swept separately (default: both)")
    p.add_argument("--sequence", type=int, help="tokens per sequence (default: 1024)")
    p.add_argument("--micro-batches", type=int, default=2, help="micro-batches (of one sequence) per step (default: 2)")
    p.add_argument("--steps", type=int, default=2, help="steps timed after the first, their median (default: 2)")
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"], help="where the programs run (default: cpu)")
    p.add_argument("--small", action="store_true", help="a smoke run: vocabulary 512, sequence 64, size tiny")
    p.add_argument(
        "--tiers",
        default="phased,disk",
        help="where the phased program keeps its state: device (its memory), phased (pinned host memory), disk "
        "(files in --remote-dir); default phased,disk",
    )
    p.add_argument(
        "--remote-dir", type=Path, help="the disk tier's folder, on the disk to measure (default: OUT/remote)"
    )
    p.add_argument(
        "--probe-bytes", type=int, default=2 * 2**30, help="bytes of the disk bandwidth probe (default 2 GiB)"
    )
    p.add_argument("--matmul-size", type=int, default=2048, help="the square matmul that measures the peak (2048)")
    p.add_argument("--no-jax", action="store_true", help="leave out the same model in JAX")
    p.add_argument("--child", help=argparse.SUPPRESS)  # one program at one size, as a subprocess runs it
    add_out_option(p)
    args = p.parse_args()
    if args.child:
        child(Spec(**json.loads(args.child)))
        return
    sizes = (args.sizes or ("tiny" if args.small else "small,medium,large")).split(",")
    unknown = [s for s in sizes if s not in SIZES]
    dtypes = args.dtypes.split(",")
    tiers = tuple(args.tiers.split(","))
    if unknown or not set(dtypes) <= {"float32", "float16"} or not set(tiers) <= set(TIERS) or not tiers:
        p.error(f"unknown sizes {unknown}, dtypes {dtypes} or tiers {tiers}: sizes are {', '.join(SIZES)}")
    vocab, sequence = (512, args.sequence or 64) if args.small else (50304, args.sequence or 1024)
    remote = (args.remote_dir or args.out / "remote").resolve()
    specs = {
        dtype: [
            Spec("phased", s, dtype, vocab, sequence, args.micro_batches, args.steps, args.device, str(remote))
            for s in sizes
        ]
        for dtype in dtypes
    }
    figures: dict[str, Any] = {
        "settings": {"vocab": vocab, "sequence": sequence, "micro_batches": args.micro_batches, "device": args.device},
        "sizes": {s: dict(zip(("layers", "width", "heads"), SIZES[s])) for s in sizes},
        "machine": _machine(args, dtypes, remote),
        "runs": [],
    }

    def run(spec: Spec) -> Figures:
        # Saved after each run: a sweep stopped by a time limit keeps what it measured.
        figures["runs"].append(run_child(spec))
        save("gpt_scale", figures, args.out)
        return figures["runs"][-1]  # type: ignore[no-any-return]

    runs, figures["largest_phased"] = sweep(specs, run, tiers, not args.no_jax)
    print(
        f"GPT, vocabulary {vocab}, {args.micro_batches} micro-batches of one {sequence}-token sequence a step, "
        f"on {args.device}; seconds, bytes per device; phased: state in memory, disk: state in files of {remote}"
    )
    print("\n".join(_table(runs)))
    disk = figures["machine"]["disk"]
    if disk:
        print(
            f"\nthe disk itself (O_DIRECT, sequential, {_bytes(disk['probe_bytes'])}): read "
            f"{disk['read_bytes_per_s'] / 1e9:.2f} GB/s, write {disk['write_bytes_per_s'] / 1e9:.2f} GB/s"
        )
    peaks = ", ".join(f"{d} {r / 1e9:.1f} GFLOP/s" for d, r in figures["machine"]["matmul_flops_per_s"].items())
    print(f"matmul peak ({args.matmul_size}-square): {peaks}")
    print("\n".join(_disk_table(runs, figures["machine"])))
    for dtype, found in figures["largest_phased"].items():
        trained = f"{found['trained']} ({found['parameters'] / 1e6:.0f}M parameters)" if found["trained"] else "none"
        stop = f"; {found['stopped_at']} did not fit" if found["stopped_at"] else "; every size given trained"
        print(f"largest model trained phased in {dtype}: {trained}{stop}")
    print(f"written to {save('gpt_scale', figures, args.out)}")


if __name__ == "__main__":
    main()
