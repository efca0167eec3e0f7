"""The run-time checks of a compiled step, cut from its one trace into a program of their own.

A checked run first evaluates the checks in this program (dead-code elimination of the step's jaxpr to the
check result) and runs the step only if all replicas pass: a failed run changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.extend
import numpy as np

# JAX's dead-code elimination of jaxprs, which cuts the check program from the step's trace, has no public name.
from jax._src.interpreters import partial_eval

from popxl.errors import OutOfRangeError
from popxl.lowering.interpreter import CheckSites
from popxl.lowering.placement import ReplicaPlacement
from popxl.lowering.world import CheckState


class CheckProgram:
    """The compiled program of a traced step's checks alone, and which of the step's flat arguments it takes.

    `checks_alone` is the per-replica step without its effects on the host, traced again where those effects
    survive the cut.
    """

    def __init__(
        self,
        traced: Any,
        arguments: tuple[Any, ...],
        sites: CheckSites,
        placement: ReplicaPlacement,
        checks_alone: Callable[..., Any],
    ) -> None:
        self.sites = sites
        self.placement = placement
        closed = traced.jaxpr
        checked = [False] * (len(closed.jaxpr.outvars) - len(CheckState._fields)) + [True] * len(CheckState._fields)
        jaxpr, used = partial_eval.dce_jaxpr(closed.jaxpr, checked)
        if has_host_callbacks(jaxpr):
            # Effects on the host survive dead-code elimination: trace the checks again, without them.
            closed = jax.jit(checks_alone).trace(*arguments).jaxpr
            jaxpr, used = partial_eval.dce_jaxpr(closed.jaxpr, True)
        checks = jax.jit(jax.extend.core.jaxpr_as_fun(jax.extend.core.ClosedJaxpr(jaxpr, closed.consts)))
        self.executable = checks.trace(*_taken(arguments, used)).lower().compile()
        self.inputs: list[bool] = used
        # Checks that depend on nothing a run is given pass or fail alike in every run.
        self.static = not any(used)
        self.static_failure = self._evaluate(arguments) if self.static else None

    def failure(self, arguments: tuple[Any, ...]) -> OutOfRangeError | None:
        """The first check that fails in a run with these arguments, or None."""
        failure = self.static_failure if self.static else self._evaluate(arguments)
        return None if failure is None else OutOfRangeError(failure)

    def _evaluate(self, arguments: tuple[Any, ...]) -> str | None:
        error = CheckState(*self.executable(*_taken(arguments, self.inputs)))
        codes = self.placement.fetch_all(error.code)
        if not codes.any():
            return None
        replica = int(np.flatnonzero(codes)[0])
        index = int(self.placement.fetch_all(error.offending)[replica])
        what = self.sites.message(int(codes[replica]), index)
        return f"{what} (replica {replica}); nothing was changed"


def has_host_callbacks(jaxpr: Any) -> bool:
    """Whether `jaxpr` or any jaxpr inside it calls back to the host."""
    if any(eqn.primitive.name in ("debug_callback", "io_callback") for eqn in jaxpr.eqns):
        return True
    return any(has_host_callbacks(sub) for sub in jax.extend.core.subjaxprs(jaxpr))


def _taken(arguments: tuple[Any, ...], used: list[bool]) -> list[Any]:
    return [a for a, u in zip(jax.tree.leaves(arguments), used, strict=True) if u]
