"""popart's fully-connected pass setting of matmuls, recorded: it has no effect here.

On an IPU, popart's fully-connected pass lays out a training matmul's weight so
that the transposes its gradient matmuls need are prepared in advance; an
inference-only program may turn it off to save that memory (popxl-addons'
`popxl_addons.transforms.use_fc_pass`). XLA chooses layouts and transposes
itself, so here the setting is only kept per matmul (`uses_fc_pass` reads it) and
changes nothing that runs. As in popart, a matmul uses the pass unless it was
turned off, and the transforms set only the matmuls that exist when they run.
"""

from __future__ import annotations

import weakref

import popxl
from popxl.extension import REGISTRY, Op

__all__ = ["disable_fc_pass", "enable_fc_pass", "uses_fc_pass"]

# The op kinds that are popart MatMul ops (those with `useFullyConnectedPass`).
_MATMULS = tuple(REGISTRY[name] for name in ("matmul", "matmul_pow2scaled"))

_SETTING: weakref.WeakKeyDictionary[Op, bool] = weakref.WeakKeyDictionary()


def _is_matmul(op: Op) -> bool:
    return any(op.opdef is kind for kind in _MATMULS)


def uses_fc_pass(op: Op) -> bool:
    """Whether matmul `op` is set to use popart's fully-connected pass (True unless turned off)."""
    if not _is_matmul(op):
        raise ValueError(f"{op} is not a matmul: only matmuls have popart's fully-connected pass setting")
    return _SETTING.get(op, True)


def _set(ir: popxl.Ir, enabled: bool) -> None:
    for graph in ir.graphs:
        for op in graph.ops:
            if _is_matmul(op):
                _SETTING[op] = enabled


def disable_fc_pass(ir: popxl.Ir) -> None:
    """Turn popart's fully-connected pass off for every matmul of `ir` (recorded only: see the module)."""
    _set(ir, False)


def enable_fc_pass(ir: popxl.Ir) -> None:
    """Turn popart's fully-connected pass back on for every matmul of `ir` (recorded only: see the module)."""
    _set(ir, True)
