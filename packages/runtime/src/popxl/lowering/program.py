"""A whole popxl program as one jitted XLA computation over per-replica state."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from popxl.errors import OutOfRangeError
from popxl.ir import Ir
from popxl.lowering import disk_tier, fit
from popxl.lowering.aliasing import Aliasing
from popxl.lowering.cache import use_engine_cache
from popxl.lowering.check_program import CheckProgram, has_host_callbacks
from popxl.lowering.disk_tier import DiskTier
from popxl.lowering.interpreter import CheckSites, LoweringContext, execute
from popxl.lowering.memory import Footprint
from popxl.lowering.memory_fit import MemoryFit
from popxl.lowering.placement import ReplicaPlacement
from popxl.lowering.replicas import ReplicaMesh
from popxl.lowering.state import Handover, State, StateLayout, buffer_key, merged
from popxl.lowering.world import CheckState, HostOutput, World
from popxl.op import CHECK_RESULT, Op, Resource, graph_writes, reachable_graphs
from popxl.remote_buffer import MEMORY_KINDS, RemoteBuffer
from popxl.streams import DeviceToHostStream, HostToDeviceStream
from popxl.tensor import Tensor, Variable

HOST_MEMORY = "pinned_host"
# Overrides the default placement of remote buffers, so that a whole test suite can run with either.
REMOTE_MEMORY_VARIABLE = "POPXL_REMOTE_MEMORY"

_IPU_NAMES = ("ipu_hw", "ipu_model")
_warned_no_ipu = False


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
    """The lowered program of an Ir: its state layout, streams, replica mesh and placement, and the compiled step."""

    def __init__(
        self,
        ir: Ir,
        device_desc: str = "cpu",
        checks: bool = True,
        replica_mode: str = "auto",
        donate_state: bool | None = None,
        remote_memory: str | None = None,
        remote_dir: str | os.PathLike[str] | None = None,
        remote_staging: int | None = None,
    ) -> None:
        if replica_mode not in ("auto", "devices", "simulate"):
            raise ValueError(f"replica_mode must be 'auto', 'devices' or 'simulate', got {replica_mode!r}")
        if remote_memory is None:
            remote_memory = os.environ.get(REMOTE_MEMORY_VARIABLE) or None
        if remote_memory not in (None, *MEMORY_KINDS):
            raise ValueError(f"remote_memory must be None, 'host' or 'device', got {remote_memory!r}")
        self.ir = ir
        use_engine_cache(ir.session_options.enableEngineCaching, ir.session_options.cachePath)
        self.replicas = ir.replication_factor
        ops = [op for g in reachable_graphs(ir.main_graph) for op in g.ops]
        _check_ops(ops)
        self._collect_resources(ops)
        folder = disk_tier.remote_dir(remote_dir)
        self.disk = None if folder is None else DiskTier(folder, disk_tier.staging_bytes(remote_staging))
        self.state = self._lay_out_state()
        self.disk = self.state.disk
        if self.disk is not None and self.replicas > 1:
            raise NotImplementedError(
                f"Remote buffers on disk (remote_dir={str(folder)!r}) need a program of one replica; this one has "
                f"{self.replicas}: keep its remote buffers in memory (no remote_dir, POPXL_REMOTE_DIR unset)"
            )
        self._place_replicas(ops, device_desc, replica_mode)
        # This process's devices: one per local replica, or the one that simulates them all.
        devices = self.placement.local_replicas if self.replica_devices else 1
        self.memory_fit = MemoryFit(self.device, devices, self.state, self.disk)
        self.remote_memory = self._remote_memory(remote_memory)
        self._build_step(checks, donate_state is None or donate_state)

    def _collect_resources(self, ops: list[Op]) -> None:
        """The remote buffers and host streams the program's ops read or write."""
        used = _unique(r for op in ops for r in sorted(op.reads | op.writes, key=repr))
        self.buffers: list[RemoteBuffer] = [r for r in used if isinstance(r, RemoteBuffer)]
        self.h2d: list[HostToDeviceStream] = [r for r in used if isinstance(r, HostToDeviceStream)]
        self.d2h: list[DeviceToHostStream] = [r for r in used if isinstance(r, DeviceToHostStream)]

    def _lay_out_state(self) -> StateLayout:
        """The state layout, with what one run writes from the ops' declarations: it is all the step returns."""
        main = self.ir.main_graph
        written = [*Aliasing(main).written(), *graph_writes(main)]
        return StateLayout(main.variables, self.buffers, self.replicas, written, self.disk, lambda b: b.memory is None)

    def _place_replicas(self, ops: list[Op], device_desc: str, replica_mode: str) -> None:
        """The replica mesh over the groupings the ops use, and the devices that run the replicas."""
        self.mesh = ReplicaMesh(self.replicas, [g for op in ops for g in op.groupings])
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

    def _remote_memory(self, asked: str | None) -> str:
        """Where remote buffers live unless they say: as asked, else pinned host memory wherever the device has it."""
        has_host = any(m.kind == HOST_MEMORY for m in self.device.addressable_memories())
        if asked == "host" and not has_host:
            raise ValueError(f"remote_memory='host' needs a '{HOST_MEMORY}' memory, which {self.device} lacks")
        placed = [b for b in self.state.buffers if b.memory == "host"]
        if placed and not has_host:
            raise ValueError(
                f"{placed[0]} has memory='host', which needs a '{HOST_MEMORY}' memory: {self.device} lacks one"
            )
        return asked or ("host" if has_host else "device")

    def _build_step(self, checks: bool, donate: bool) -> None:
        """The jitted step; it is traced and compiled at the first run for each layout of its arguments.

        The state a run writes is donated to XLA and updated in place (unless donate_state=False). The step
        is traced once, with its checks; a checked run first evaluates them in a program cut from that trace
        (dead-code elimination to the check result) and runs the step only if all replicas pass: a failed
        run changes nothing.
        """
        self.sites = CheckSites() if checks else None
        donated = (0,) if donate else ()
        self._step = jax.jit(self.mesh.per_replica(self._split_step, self.replica_devices), donate_argnums=donated)
        self._compiled: dict[Any, _Compiled] = {}

    @property
    def variables(self) -> list[Variable]:
        """The variables with a host value (a loaded variable's is its whole variable's)."""
        return self.state.variables

    @property
    def stream_memory_kind(self) -> str | None:
        """JAX's memory kind for a run's host stream data (None: the devices' default memory)."""
        return HOST_MEMORY if self.remote_memory == "host" else None

    def buffer_memory_kind(self, buffer: RemoteBuffer) -> str | None:
        """JAX's memory kind for `buffer`'s storage: its own placement, else the Session's."""
        return HOST_MEMORY if (buffer.memory or self.remote_memory) == "host" else None

    @property
    def mode(self) -> str:
        """'devices' (one replica per device) or 'simulate' (all replicas on one device)."""
        return "devices" if self.replica_devices is not None else "simulate"

    @property
    def host_outputs(self) -> bool:
        """Whether host_stores fill a stack in host memory (with the host stream data, as popxl streams each store
        to the host when it happens) rather than on the device. Not with simulated replicas: one stack per replica
        would be written at a replica's own entry, which host memory can't take (as remote buffers can't)."""
        return self.stream_memory_kind is not None and (self.replicas == 1 or self.mode == "devices")

    def _output_stack(self, stream: DeviceToHostStream, transfers: int) -> jax.Array:
        """The zeroed `(transfers, *shape)` a run's host_stores to `stream` fill."""
        zeros = jnp.zeros((transfers, *stream.shape), stream.dtype.as_numpy())
        return jax.device_put(zeros, jax.memory.Space.Host) if self.host_outputs else zeros

    def _split_step(self, written: State, readonly: State, host_inputs: dict[str, jax.Array]) -> Any:
        written, outputs, check = self._replica_step(merged(written, readonly), host_inputs, self.sites)
        return (written, outputs, check) if self.sites is not None else (written, outputs)

    def _split_checks(self, written: State, readonly: State, host_inputs: dict[str, jax.Array]) -> CheckState:
        _, _, check = self._replica_step(merged(written, readonly), host_inputs, self.sites, host_effects=False)
        return check

    def _replica_step(
        self, state: State, host_inputs: dict[str, jax.Array], sites: CheckSites | None, host_effects: bool = True
    ) -> Any:
        nht = self.ir.num_host_transfers
        values: dict[Resource, Any] = {b: state["buffers"][buffer_key(b)] for b in self.state.buffers}
        values.update({b: jnp.int32(0) for b in (self.disk.buffers if self.disk is not None else [])})
        values.update({s: jnp.int32(0) for s in self.h2d})
        values.update({s: HostOutput(self._output_stack(s, nht), jnp.int32(0)) for s in self.d2h})
        values[CHECK_RESULT] = CheckState(jnp.int32(0), jnp.int32(0))
        world = World(values)
        options = self.ir.session_options
        ctx = LoweringContext(
            world,
            host_inputs,
            self.mesh,
            sites,
            self.remote_memory,
            options,
            host_effects,
            self.host_outputs,
            copy_out_loads=self.device.platform == "cpu",
            disk=self.disk,
        )
        bound: dict[Tensor, jax.Array] = {v: state["vars"][v.id] for v in self.state.carried}
        finals = execute(ctx, self.ir.main_graph, bound, self.state.written_variables)
        written = {
            "vars": {v.id: value for v, value in zip(self.state.written_variables, finals)},
            "buffers": {buffer_key(b): world.buffer(b) for b in self.state.written_buffers},
        }
        outputs = {s.tensor_id: world.host_output(s).values for s in self.d2h}
        return written, outputs, world.check_state

    def init_state(self, host: Mapping[Variable, np.ndarray[Any, Any]], handover: Handover | None = None) -> State:
        """Device state: variables from `host`, remote buffers zeroed (but for remote variables' entries); see
        `StateLayout.initial` for `handover`.

        Refused with `OutOfMemoryError` before anything is allocated where the machine cannot hold it. The host
        values `handover` releases as they are placed count as host memory given back along the way.
        """
        entries = self.state.sizes(self.buffer_memory_kind, self.placement.local_replicas)
        place = lambda: self.state.initial(host, self.placement, self.buffer_memory_kind, handover)  # noqa: E731
        return self.memory_fit.attach(host, entries, handover, place)

    def with_variables(self, state: State, host: Mapping[Variable, np.ndarray[Any, Any]]) -> State:
        """`state` with the given variables replaced from host values."""
        return self.state.with_variables(state, host, self.placement, self.buffer_memory_kind)

    def read_variables(self, state: State, variables: Iterable[Variable]) -> dict[Variable, np.ndarray[Any, Any]]:
        """Host values of `variables` from device state."""
        return self.state.read(state, variables, self.placement)

    def replica_rows(self, state: State, var: Variable) -> np.ndarray[Any, Any]:
        """Every replica's value of `var`, `(replicas, *group shape)`, from device state."""
        return self.state.replica_rows(state, var, self.placement)

    def run(
        self, state: State, inputs: dict[str, np.ndarray[Any, Any]]
    ) -> tuple[State, dict[str, np.ndarray[Any, Any]], OutOfRangeError | None]:
        """One execution of the main graph: the new state, the outputs `(local replicas, nht, *shape)`, and
        the error of a failed check (when a checked index was out of range on any replica: then the state
        is the one given and there are no outputs)."""
        arguments = self._arguments(state, inputs)
        compiled = self._compile(arguments)
        hlo = lambda: compiled.step.as_text()  # noqa: E731
        self.memory_fit.require_run(compiled.footprint, arguments, hlo)
        failure = None if compiled.checks is None else compiled.checks.failure(arguments)
        if failure is not None:
            return state, {}, failure
        if self.disk is not None:
            self.disk.begin_run()
        written, outputs = self.memory_fit.running(
            compiled.footprint, arguments, hlo, lambda: compiled.step(*arguments)
        )[:2]
        # A run returns once the device has finished it, as in popxl, outputs or not, and once what it
        # prints (callbacks to the host, which JAX runs apart from the step) is printed.
        jax.block_until_ready(written)
        if compiled.prints:
            jax.effects_barrier()
        if self.disk is not None:
            self.disk.end_run()
        return merged(written, arguments[1]), {k: self.placement.fetch_local(v) for k, v in outputs.items()}, None

    def _compile(self, arguments: tuple[Any, ...]) -> _Compiled:
        """The step and its check program for arguments of this layout, traced and compiled at the first run."""
        leaves, tree = jax.tree.flatten(arguments)
        # num_host_transfers may change after the Session is created: it shapes the step's outputs.
        key = (tree, tuple((a.shape, a.dtype, a.sharding) for a in leaves), self.ir.num_host_transfers)
        if key not in self._compiled:
            traced = self._step.trace(*arguments)
            executable = traced.lower().compile()
            compiled = _Compiled(traced, executable, Footprint(executable, arguments))
            compiled.prints = has_host_callbacks(traced.jaxpr.jaxpr)
            if self.sites is not None:
                checks_alone = self.mesh.per_replica(self._split_checks, self.replica_devices)
                compiled.checks = CheckProgram(traced, arguments, self.sites, self.placement, checks_alone)
            self._compiled[key] = compiled
            fit.give_back_freed_memory()  # what compiling used and freed, before the run needs memory
        return self._compiled[key]

    def _put_inputs(self, inputs: dict[str, np.ndarray[Any, Any]]) -> dict[str, jax.Array]:
        # A run's host stream data stays on the host with the remote buffers; each host_load moves one transfer.
        return {k: self.placement.put_local(v, self.stream_memory_kind) for k, v in inputs.items()}

    def traced(self, state: State, inputs: dict[str, np.ndarray[Any, Any]]) -> Any:
        """The step traced for these arguments (`jax.stages.Traced`: its jaxpr, and `.lower()`)."""
        return self._compile(self._arguments(state, inputs)).traced

    def memory(self, state: State, inputs: dict[str, np.ndarray[Any, Any]]) -> dict[str, int]:
        """Device and host bytes of the compiled step, and XLA's figures (see `memory_figures`)."""
        arguments = self._arguments(state, inputs)
        figures = self._compile(arguments).footprint.figures()
        staging = 0 if self.disk is None else self.disk.staging_bytes()
        figures["host_bytes"] += staging
        figures["disk_bytes"] = 0 if self.disk is None else self.disk.disk_bytes()
        figures["disk_staging"] = staging
        return figures

    def require_fit(self, state: State, inputs: dict[str, np.ndarray[Any, Any]]) -> None:
        """Raise `OutOfMemoryError` if a run with these inputs would allocate more than the machine has."""
        arguments = self._arguments(state, inputs)
        compiled = self._compile(arguments)
        self.memory_fit.require_run(compiled.footprint, arguments, lambda: compiled.step.as_text())

    def _arguments(self, state: State, inputs: dict[str, np.ndarray[Any, Any]]) -> tuple[Any, ...]:
        """The step's arguments: the state, and the inputs put where the step reads them (checked to fit first)."""
        self.memory_fit.require_inputs(inputs, "device" if self.stream_memory_kind is None else "host")
        return (*self.state.split(state), self._put_inputs(inputs))


class _Compiled:
    """One layout's traced step, its executable and its check program."""

    def __init__(self, traced: Any, step: Any, footprint: Footprint) -> None:
        self.traced = traced
        self.step = step
        self.footprint = footprint
        self.checks: CheckProgram | None = None
        self.prints = False


def _check_ops(ops: list[Op]) -> None:
    """Let each op kind refuse its ops that this runtime cannot run."""
    for op in ops:
        if op.opdef.check is not None:
            op.opdef.check(op)


def _unique(items: Any) -> list[Any]:
    out: list[Any] = []
    for x in items:
        if not any(x is y for y in out):
            out.append(x)
    return out
