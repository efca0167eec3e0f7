"""popart's fully-connected pass setting of matmuls, recorded: it has no effect here.

On an IPU, popart's fully-connected pass lays out a training matmul's weight so
that the transposes its gradient matmuls need are prepared in advance; an
inference-only program may turn it off to save that memory (popxl-addons'
`popxl_addons.transforms.use_fc_pass`). XLA chooses layouts and transposes
itself, so here the setting is only recorded with the matmul's other IPU-only
settings (`popxl.ipu_only`; `uses_fc_pass` reads it) and changes nothing that
runs. The matmuls are the ops whose kinds declare the setting
(`PopartFacts.ipu_settings`). As in popart, a matmul uses the pass unless it was
turned off, and the transforms set only the matmuls that exist when they run.
"""

from __future__ import annotations

import popxl
from popxl import ipu_only
from popxl.extension import Op

__all__ = ["disable_fc_pass", "enable_fc_pass", "uses_fc_pass"]


def _has_fc_pass(op: Op) -> bool:
    return "fully_connected_pass" in op.opdef.popart.ipu_settings


def uses_fc_pass(op: Op) -> bool:
    """Whether matmul `op` is set to use popart's fully-connected pass (True unless turned off)."""
    if not _has_fc_pass(op):
        raise ValueError(f"{op} is not a matmul: only matmuls have popart's fully-connected pass setting")
    return bool(ipu_only.recorded(op).get("fully_connected_pass", True))


def _set(ir: popxl.Ir, enabled: bool) -> None:
    for graph in ir.graphs:
        for op in graph.ops:
            if _has_fc_pass(op):
                ipu_only.record(op, fully_connected_pass=enabled)


def disable_fc_pass(ir: popxl.Ir) -> None:
    """Turn popart's fully-connected pass off for every matmul of `ir` (recorded only: see the module)."""
    _set(ir, False)


def enable_fc_pass(ir: popxl.Ir) -> None:
    """Turn popart's fully-connected pass back on for every matmul of `ir` (recorded only: see the module)."""
    _set(ir, True)
