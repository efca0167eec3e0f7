"""Running a small popxl program in one call, for the runtime's tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

import popxl
from popxl import ops


def run_main(
    build: Callable[[], Mapping[str, popxl.Tensor]],
    replication: int = 1,
    inputs: Mapping[str, np.ndarray[Any, Any]] | None = None,
    **session_options: Any,
) -> dict[str, np.ndarray[Any, Any]]:
    """Build a main graph whose named results are stored to streams; run it once and return them."""
    ir = popxl.Ir(replication=replication)
    with ir.main_graph:
        results = build()
        streams = {}
        for name, t in results.items():
            streams[name] = popxl.d2h_stream(t.shape, t.dtype, name=name)
            ops.host_store(streams[name], t)
    with popxl.Session(ir, "cpu", **session_options) as session:
        out = session.run(inputs or {})
    return {name: out[s] for name, s in streams.items()}
