"""A whole popxl program as one jitted XLA computation over per-replica state."""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np

from popxl.errors import OutOfRangeError
from popxl.ir import Ir
from popxl.lowering.interpreter import CheckSites, LoweringContext, execute
from popxl.lowering.memory import memory_figures
from popxl.lowering.placement import ReplicaPlacement
from popxl.lowering.remote_memory import MEMORY_KINDS
from popxl.lowering.replicas import ReplicaMesh
from popxl.lowering.world import CheckState, HostOutput, World
from popxl.op import CHECK_RESULT, Resource, graph_writes, modified_roots, reachable_graphs
from popxl.remote_buffer import RemoteBuffer
from popxl.streams import DeviceToHostStream, HostToDeviceStream
from popxl.tensor import LoadedVariable, RemoteVariable, Tensor, Variable

State = dict[str, dict[str, jax.Array]]
_PARTS = ("vars", "buffers")
HOST_MEMORY = "pinned_host"
# Overrides the default placement of remote buffers, so that a whole test suite can run with either.
REMOTE_MEMORY_VARIABLE = "POPXL_REMOTE_MEMORY"

_IPU_NAMES = ("ipu_hw", "ipu_model")
_warned_no_ipu = False


def buffer_key(buffer: RemoteBuffer) -> str:
    """The key of a remote buffer's storage in the program's state."""
    return f"buffer{buffer.remote_buffer_id}"


def _platform(device_desc: str) -> str | None:
    global _warned_no_ipu
    if device_desc in _IPU_NAMES:
        if not _warned_no_ipu:
            warnings.warn(
                f"Session device {device_desc!r}: no IPU is used, running on JAX's default device", stacklevel=4
            )
            _warned_no_ipu = True
        return None
    if device_desc in ("cpu", "gpu"):
        return device_desc
    raise ValueError(f"Unknown device {device_desc!r}: expected 'cpu', 'gpu', 'ipu_hw' or 'ipu_model'")


class Program:
    """The lowered program of an Ir: state layout, streams, replicas and the jitted step."""

    def __init__(
        self,
        ir: Ir,
        device_desc: str = "cpu",
        checks: bool = True,
        replica_mode: str = "auto",
        donate_state: bool | None = None,
        remote_memory: str | None = None,
    ) -> None:
        if replica_mode not in ("auto", "devices", "simulate"):
            raise ValueError(f"replica_mode must be 'auto', 'devices' or 'simulate', got {replica_mode!r}")
        if remote_memory is None:
            remote_memory = os.environ.get(REMOTE_MEMORY_VARIABLE) or None
        if remote_memory not in (None, *MEMORY_KINDS):
            raise ValueError(f"remote_memory must be None, 'host' or 'device', got {remote_memory!r}")
        self.ir = ir
        main = ir.main_graph
        ops = [op for g in reachable_graphs(main) for op in g.ops]
        for op in ops:
            if op.opdef.check is not None:
                op.opdef.check(op)
        # A loaded variable's host value is its whole variable's, so only the latter has one.
        self.variables: list[Variable] = [v for v in main.variables if not isinstance(v, LoadedVariable)]
        # Remote variables live in their buffer's entry; the rest are state the step carries.
        self.device_variables = [v for v in main.variables if not isinstance(v, RemoteVariable)]
        self.remote_variables = [v for v in self.variables if isinstance(v, RemoteVariable)]
        self.loaded = {v.whole: v for v in main.variables if isinstance(v, LoadedVariable)}
        used = _unique(r for op in ops for r in sorted(op.reads | op.writes, key=repr))
        self.buffers: list[RemoteBuffer] = [r for r in used if isinstance(r, RemoteBuffer)]
        self.h2d: list[HostToDeviceStream] = [r for r in used if isinstance(r, HostToDeviceStream)]
        self.d2h: list[DeviceToHostStream] = [r for r in used if isinstance(r, DeviceToHostStream)]
        groupings = [g for op in ops for g in op.groupings]
        # What one run replaces, from the ops' declarations: it is all the step returns.
        writes = graph_writes(main)
        modified = set(modified_roots(main))
        self.written_variables = [v for v in self.device_variables if v in modified]
        self._written = {
            "vars": sorted(v.id for v in self.written_variables),
            "buffers": sorted(buffer_key(b) for b in self.buffers if b in writes),
        }
        self.replicas = ir.replication_factor
        self.mesh = ReplicaMesh(self.replicas, groupings)
        platform = _platform(device_desc)
        try:
            available = jax.devices(platform) if platform else jax.devices()
        except RuntimeError as e:
            raise ValueError(f"Session device {device_desc!r}: JAX sees no such device here ({e})") from e
        self.device = available[0]
        use_devices = replica_mode == "devices" or (replica_mode == "auto" and len(available) >= self.replicas > 1)
        if use_devices and len(available) < self.replicas:
            raise ValueError(
                f"replica_mode='devices' needs {self.replicas} devices, but JAX sees {len(available)} "
                f"{available[0].platform} device(s)"
            )
        self.replica_devices = available[: self.replicas] if use_devices and self.replicas > 1 else None
        self.placement = ReplicaPlacement(self.mesh, self.replica_devices, self.device)
        has_host = any(m.kind == HOST_MEMORY for m in self.device.addressable_memories())
        if remote_memory == "host" and not has_host:
            raise ValueError(f"remote_memory='host' needs a '{HOST_MEMORY}' memory, which {self.device} lacks")
        self.remote_memory = remote_memory or ("host" if has_host else "device")
        self.sites = CheckSites() if checks else None
        # The state a run writes is donated to XLA and updated in place (unless donate_state=False). A checked
        # run first evaluates every check in a program of its own, which XLA reduces to what computes the
        # checked indices, and runs the step only if all replicas pass: a failed run changes nothing.
        donate = (0,) if donate_state is None or donate_state else ()
        self._step = jax.jit(self.mesh.per_replica(self._split_step, self.replica_devices), donate_argnums=donate)
        self._checks = jax.jit(self.mesh.per_replica(self._split_checks, self.replica_devices)) if checks else None
        # Checks that depend on nothing a run is given pass or fail alike in every run: evaluated once.
        self._check_program: Any = None  # compiled at the first run
        self._static_checks = False
        self._static_failure: str | None = None

    @property
    def buffer_memory_kind(self) -> str | None:
        """JAX's memory kind for remote buffers and host stream data (None: the devices' default memory)."""
        return HOST_MEMORY if self.remote_memory == "host" else None

    @property
    def mode(self) -> str:
        """'devices' (one replica per device) or 'simulate' (all replicas on one device)."""
        return "devices" if self.replica_devices is not None else "simulate"

    def _split_step(self, written: State, readonly: State, host_inputs: dict[str, jax.Array]) -> Any:
        state = {part: {**readonly[part], **written[part]} for part in _PARTS}
        written, outputs, _ = self._replica_step(state, host_inputs, None)
        return written, outputs

    def _split_checks(self, written: State, readonly: State, host_inputs: dict[str, jax.Array]) -> CheckState:
        # Only the check result is used: XLA removes the rest of the program that does not feed an index.
        state = {part: {**readonly[part], **written[part]} for part in _PARTS}
        _, _, check = self._replica_step(state, host_inputs, self.sites, host_effects=False)
        return check

    def _split(self, state: State) -> tuple[State, State]:
        """`state` as (the entries the program writes, the rest)."""
        written = {part: {k: state[part][k] for k in self._written[part]} for part in _PARTS}
        readonly = {part: {k: v for k, v in state[part].items() if k not in written[part]} for part in _PARTS}
        return written, readonly

    def _replica_step(
        self, state: State, host_inputs: dict[str, jax.Array], sites: CheckSites | None, host_effects: bool = True
    ) -> Any:
        nht = self.ir.num_host_transfers
        values: dict[Resource, Any] = {b: state["buffers"][buffer_key(b)] for b in self.buffers}
        values.update({s: jnp.int32(0) for s in self.h2d})
        values.update({s: HostOutput(jnp.zeros((nht, *s.shape), s.dtype.as_numpy()), jnp.int32(0)) for s in self.d2h})
        values[CHECK_RESULT] = CheckState(jnp.int32(0), jnp.int32(0))
        world = World(values)
        options = self.ir.session_options
        ctx = LoweringContext(world, host_inputs, self.mesh, sites, self.remote_memory, options, host_effects)
        bound: dict[Tensor, jax.Array] = {v: state["vars"][v.id] for v in self.device_variables}
        finals = execute(ctx, self.ir.main_graph, bound, self.written_variables)
        written = {
            "vars": {v.id: value for v, value in zip(self.written_variables, finals)},
            "buffers": {k: world.buffer(b) for b in self.buffers if (k := buffer_key(b)) in self._written["buffers"]},
        }
        outputs = {s.tensor_id: world.host_output(s).values for s in self.d2h}
        return written, outputs, world.check_state

    def replica_values(self, var: Variable, host: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Per-replica values `(R, *shape)` of `var` from its host layout."""
        g = var.replica_grouping
        if g.num_groups > 1:
            return np.stack([host[g.group_of(r)] for r in range(self.replicas)])
        return np.broadcast_to(host, (self.replicas, *host.shape)).copy()

    def host_values(self, var: Variable, replicas: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Host layout of `var` from per-replica values: the first replica of each group."""
        g = var.replica_grouping
        if g.num_groups > 1:
            return np.stack([replicas[g.members(k)[0]] for k in range(g.num_groups)])
        return np.asarray(replicas[0])

    def _shard_rows(self, var: RemoteVariable, rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Each replica's shard of its full value (`rows`, one per replica)."""
        c = var.buffer.tensor_shape[0]
        flat = rows.reshape(self.replicas, -1)
        padded = np.pad(flat, ((0, 0), (0, c * var.shard_over - flat.shape[1])))
        ranks = [var.shard_domain(r).index(r) for r in range(self.replicas)]
        return np.stack([padded[r, k * c : (k + 1) * c] for r, k in enumerate(ranks)])

    def _unshard_rows(self, var: RemoteVariable, shards: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Each replica's full value, from the shards held by its shard domain."""
        size = math.prod(var.meta_shape)
        full = [np.concatenate([shards[m] for m in var.shard_domain(r)])[:size] for r in range(self.replicas)]
        return np.stack(full).reshape(self.replicas, *var.meta_shape)

    def _stored_rows(self, var: RemoteVariable, host: Any) -> np.ndarray[Any, Any]:
        rows = self.replica_values(var, host)
        return self._shard_rows(var, rows) if var.sharded else rows.reshape(self.replicas, *var.buffer.tensor_shape)

    def init_state(self, host: dict[Variable, np.ndarray[Any, Any]]) -> State:
        """Device state: variables from `host`, remote buffers zeroed at their final size (but for remote variables)."""
        r = self.replicas
        buffers = {
            buffer_key(b): np.zeros((r, b.entries, *b.tensor_shape), b.tensor_dtype.as_numpy()) for b in self.buffers
        }
        for v in self.remote_variables:
            if buffer_key(v.buffer) not in buffers:
                buffers[buffer_key(v.buffer)] = np.zeros(
                    (r, v.buffer.entries, *v.buffer.tensor_shape), v.dtype.as_numpy()
                )
            buffers[buffer_key(v.buffer)][:, v.offset] = self._stored_rows(v, host[v])
        return {
            "vars": {v.id: self.placement.put_all(self._device_rows(v, host)) for v in self.device_variables},
            "buffers": {k: self.placement.put_all(b, self.buffer_memory_kind) for k, b in buffers.items()},
        }

    def _device_rows(self, v: Variable, host: dict[Variable, np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
        if isinstance(v, LoadedVariable):
            return self._stored_rows(v.whole, host[v.whole])
        return self.replica_values(v, host[v])

    def with_variables(self, state: State, host: dict[Variable, np.ndarray[Any, Any]]) -> State:
        """`state` with the given variables replaced from host values."""
        new_vars = dict(state["vars"])
        new_buffers = dict(state["buffers"])
        for v, data in host.items():
            if isinstance(v, RemoteVariable):
                key = buffer_key(v.buffer)
                rows = self.placement.fetch_all(new_buffers[key]).copy()
                rows[:, v.offset] = self._stored_rows(v, data)
                new_buffers[key] = self.placement.put_all(rows, self.buffer_memory_kind)
                if v in self.loaded:
                    new_vars[self.loaded[v].id] = self.placement.put_all(rows[:, v.offset])
            else:
                new_vars[v.id] = self.placement.put_all(self.replica_values(v, data))
        return {"vars": new_vars, "buffers": new_buffers}

    def read_variables(self, state: State, variables: list[Variable]) -> dict[Variable, np.ndarray[Any, Any]]:
        """Host values of `variables` from device state (a remote variable's from its loaded value, if any)."""
        return {v: self.host_values(v, self.replica_rows(state, v)) for v in variables}

    def replica_rows(self, state: State, v: Variable) -> np.ndarray[Any, Any]:
        """Every replica's value of `v`, `(replicas, *group shape)`, from device state."""
        if not isinstance(v, RemoteVariable):
            return self.placement.fetch_all(state["vars"][v.id])
        if v in self.loaded:
            rows = self.placement.fetch_all(state["vars"][self.loaded[v].id])
        else:
            rows = self.placement.fetch_all(state["buffers"][buffer_key(v.buffer)])[:, v.offset]
        return self._unshard_rows(v, rows) if v.sharded else rows.reshape(self.replicas, *v.group_shape)

    def run(
        self, state: State, inputs: dict[str, np.ndarray[Any, Any]]
    ) -> tuple[State, dict[str, np.ndarray[Any, Any]], OutOfRangeError | None]:
        """One execution of the main graph: the new state, the outputs `(local replicas, nht, *shape)`, and
        the error of a failed check (when a checked index was out of range on any replica: then the state
        is the one given and there are no outputs)."""
        device_inputs = self._put_inputs(inputs)
        written_in, readonly = self._split(state)
        failure = self._failed_check(written_in, readonly, device_inputs)
        if failure is not None:
            return state, {}, failure
        written, outputs = self._step(written_in, readonly, device_inputs)
        # A run returns once the device has finished it, as in popxl, outputs or not.
        jax.block_until_ready(written)
        new_state = {part: {**readonly[part], **written[part]} for part in _PARTS}
        return new_state, {k: self.placement.fetch_local(v) for k, v in outputs.items()}, None

    def _failed_check(self, *arguments: Any) -> OutOfRangeError | None:
        """The first check that fails in a run with these arguments, or None."""
        if self._checks is None:
            return None
        if self._check_program is None:
            # Traced once: the compiled program serves every run (a call of the jitted function would trace again).
            traced = self._checks.trace(*arguments)
            self._static_checks = not _reads_arguments(traced.jaxpr)
            self._check_program = traced.lower().compile()
            if self._static_checks:
                self._static_failure = self._evaluate_checks(arguments)
        failure = self._static_failure if self._static_checks else self._evaluate_checks(arguments)
        return None if failure is None else OutOfRangeError(failure)

    def _evaluate_checks(self, arguments: tuple[Any, ...]) -> str | None:
        assert self._check_program is not None and self.sites is not None
        error = self._check_program(*arguments)
        codes = self.placement.fetch_all(error.code)
        if not codes.any():
            return None
        replica = int(np.flatnonzero(codes)[0])
        index = int(self.placement.fetch_all(error.offending)[replica])
        what = self.sites.message(int(codes[replica]), index)
        return f"{what} (replica {replica}); nothing was changed"

    def _put_inputs(self, inputs: dict[str, np.ndarray[Any, Any]]) -> dict[str, jax.Array]:
        # A run's host stream data stays on the host with the remote buffers; each host_load moves one transfer.
        return {k: self.placement.put_local(v, self.buffer_memory_kind) for k, v in inputs.items()}

    def traced(self, state: State, inputs: dict[str, np.ndarray[Any, Any]]) -> Any:
        """The step traced for these arguments (`jax.stages.Traced`: its jaxpr, and `.lower()`)."""
        return self._step.trace(*self._arguments(state, inputs))

    def memory(self, state: State, inputs: dict[str, np.ndarray[Any, Any]]) -> dict[str, int]:
        """Device and host bytes of the compiled step, and XLA's figures (see `memory_figures`)."""
        arguments = self._arguments(state, inputs)
        return memory_figures(self._step.trace(*arguments).lower().compile(), arguments)

    def _arguments(self, state: State, inputs: dict[str, np.ndarray[Any, Any]]) -> tuple[Any, ...]:
        return (*self._split(state), self._put_inputs(inputs))


def _reads_arguments(closed: Any) -> bool:
    """Whether any output of a traced program depends on its arguments (not on constants alone)."""
    jaxpr = closed.jaxpr
    live = {v for v in jaxpr.outvars if isinstance(v, jax.extend.core.Var)}
    for eqn in reversed(jaxpr.eqns):
        if any(v in live for v in eqn.outvars):
            live.update(v for v in eqn.invars if isinstance(v, jax.extend.core.Var))
    return any(v in live for v in jaxpr.invars)


def _unique(items: Any) -> list[Any]:
    out: list[Any] = []
    for x in items:
        if not any(x is y for y in out):
            out.append(x)
    return out
