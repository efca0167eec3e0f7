"""Helpers shared by the benchmarks: interleaved timing and JSON results."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

# Figures of a run go to the untracked out/bench/; benchmarks/results/ holds figures committed deliberately.
RESULTS = Path(__file__).resolve().parent.parent / "out" / "bench"


def add_out_option(parser: argparse.ArgumentParser) -> None:
    """Add `--out`, the folder a benchmark writes its figures and picture to (default: out/bench/)."""
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the figures (JSON) and any picture (PNG)")


def interleaved(fns: Mapping[str, Callable[[], Any]], repeats: int, warmup: int = 2) -> dict[str, float]:
    """Median seconds per call of each function, measured in alternation so that noise hits all alike.

    The order rotates each round: a call can run slower for following another (caches, allocator)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            fn = fns[name]
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in samples.items()}


def matmul_flops(layers: int, width: int, sequence: int, vocab: int, tokens: int) -> float:
    """Matmul FLOPs of one GPT training step over `tokens` tokens (forward, and backward at twice the forward)."""
    per_token = layers * (24 * width * width + 4 * sequence * width) + 2 * width * vocab
    return float(3 * per_token * tokens)


def machine_matmul_rate(device: Any, dtype: Any, size: int) -> float:
    """FLOP/s of a (size x size) @ (size x size) matmul in `dtype` on `device`, the median of a few runs."""
    import jax
    import jax.numpy as jnp

    a = jax.device_put(jnp.ones((size, size), dtype), device)
    f = jax.jit(lambda x: x @ x)
    seconds = interleaved({"matmul": lambda: f(a).block_until_ready()}, repeats=5, warmup=2)["matmul"]
    return 2.0 * size**3 / seconds


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds taken by one call of `fn`, and its result."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def save(name: str, figures: dict[str, Any], out: Path = RESULTS) -> Path:
    """Write `figures` to `out`/<name>.json (default out/bench/)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(figures, indent=2))
    return path


def plot_ratios(
    name: str,
    title: str,
    groups: Mapping[str, Mapping[str, float]],
    target: float | None = None,
    out: Path = RESULTS,
) -> Path:
    """A bar chart of ratios (one bar per series in each group) to `out`/<name>.png, 1.0 and `target` marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = list(dict.fromkeys(k for g in groups.values() for k in g))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(groups) * max(len(series), 1) * 0.5 + 2), 3.6))
    width = 0.8 / max(len(series), 1)
    for k, label in enumerate(series):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(groups))]
        ax.bar(xs, [g.get(label, float("nan")) for g in groups.values()], width, label=label)
    ax.axhline(1.0, color="black", lw=0.8)
    if target is not None:
        ax.axhline(target, color="red", lw=0.8, ls="--", label=f"target {target:g}")
    ax.set_xticks(range(len(groups)), list(groups), rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ratio (lower is better)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
