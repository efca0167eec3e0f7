"""Helpers shared by the benchmarks: interleaved timing and JSON results."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

# Figures of a run go to the untracked out/bench/; benchmarks/results/ holds figures committed deliberately.
RESULTS = Path(__file__).resolve().parent.parent / "out" / "bench"


def interleaved(fns: Mapping[str, Callable[[], Any]], repeats: int, warmup: int = 2) -> dict[str, float]:
    """Median seconds per call of each function, measured in alternation so that noise hits all alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in samples.items()}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds taken by one call of `fn`, and its result."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def save(name: str, figures: dict[str, Any]) -> Path:
    """Write `figures` to out/bench/<name>.json."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(figures, indent=2))
    return path
