"""Session: compiles an Ir once and runs it, holding variables and remote buffers."""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from popxl import dtypes
from popxl.host_layout import HostLayout
from popxl.ir import Ir
from popxl.lowering import fit
from popxl.lowering.disk_tier import RemoteIOEvent
from popxl.lowering.host_values import Handing, HostValues
from popxl.lowering.program import Program
from popxl.streams import DeviceToHostStream, HostToDeviceStream
from popxl.tensor import Constant, Tensor, Variable
from popxl.utils import to_numpy

Array = np.ndarray[Any, Any]


class Session:
    """A compiled popxl program with its device state.

    Use it as a context manager: entering attaches and copies the weights to the
    device, leaving copies them back. The state a run writes is updated in
    place (donated to XLA) unless `donate_state=False`; with `checks` (the
    default) every run-time index check is evaluated before the run, which
    changes nothing if one fails, and `checks=False` skips them.
    `replica_mode` picks one device per replica ("devices"), a one-device
    simulation ("simulate") or the former when enough devices exist ("auto").
    `remote_memory` puts remote buffers, remote variables and each run's host
    stream data in the devices' pinned host memory ("host", as an IPU keeps
    them off-chip and streams from the host) or in device memory ("device");
    None picks the environment variable POPXL_REMOTE_MEMORY if set, else
    "host" wherever the device has such memory.

    Attaching and each run are refused with `popxl.OutOfMemoryError`, before
    anything is allocated, where the machine's memory cannot hold them
    (`check_memory`).

    While attached (with `weights_to_host_on_exit`, the default), the devices
    hold the variables' values alone: the host copies are dropped at attach,
    each value is read from the devices when asked for (`get_tensor_data`, or
    the variable's `host_data`) and all are read back when the Session
    detaches, even after an error. So a program's state is held once, not on
    the host and the device both (on a CPU, one memory).

    With `remote_dir` (or the environment variable POPXL_REMOTE_DIR), remote
    buffers and remote variables that do not say where they live (`memory`)
    keep their entries in files of that folder on local disk instead of
    memory, and the program's loads and stores stream them through staging
    buffers: at most `remote_staging` bytes (POPXL_REMOTE_STAGING, default
    512 MiB) read ahead and as many written behind. Attaching is refused where
    the folder's disk has too little room. A detached remote variable there
    has for host value a read-only view of its entry in the file, which the
    OS reads as it is used: state larger than memory is never read whole.
    `memory_analysis` counts the staging as host bytes, the files as
    `disk_bytes`.

    A variable created from an `np.memmap` keeps its host value in the map:
    `get_tensor_data` returns the map itself and `weights_to_host` writes into
    it and flushes it; with a read-only map, weights never go to the host (as
    in popxl, leaving the context does not try).
    """

    def __init__(
        self,
        ir: Ir,
        device_desc: str = "cpu",
        weights_to_host_on_exit: bool = True,
        checks: bool = True,
        replica_mode: str = "auto",
        donate_state: bool | None = None,
        remote_memory: str | None = None,
        remote_dir: str | os.PathLike[str] | None = None,
        remote_staging: int | None = None,
    ) -> None:
        self.ir = ir
        self._program = Program(
            ir, device_desc, checks, replica_mode, donate_state, remote_memory, remote_dir, remote_staging
        )
        if self._program.disk is not None:
            # The files go with the Session; views of them handed out stay readable (the OS keeps what is mapped).
            weakref.finalize(self, self._program.disk.remove)
        self._read_only_maps = [
            v.id for v in self._program.variables if v.is_memmap and not v.host_data.flags.writeable
        ]
        self.weights_to_host_on_exit = weights_to_host_on_exit and not self._read_only_maps
        ir.lock_replication()
        ir.write_final_dot()
        self._host = HostValues(self._program.variables, self.get_tensor_data)
        self._state: Any = None
        self._attached = 0

    @property
    def is_attached(self) -> bool:
        """Whether the session holds device state."""
        return self._attached > 0

    @property
    def remote_memory(self) -> str:
        """Where remote buffers and remote variables live: 'host' (pinned host memory) or 'device'."""
        return self._program.remote_memory

    @property
    def remote_dir(self) -> str | None:
        """The folder of the remote buffers on local disk, or None where they are all in memory."""
        disk = self._program.disk
        return None if disk is None else str(disk.folder)

    def record_remote_io(self) -> list[RemoteIOEvent]:
        """Start timing the disk tier's work; the list returned fills as runs load and store entries.

        Each event is a worker's "read" or "write" of an entry, or the program's "load" or "store" of one
        (from asking to having it): a timeline of how the disk traffic overlaps the compute.
        """
        disk = self._program.disk
        if disk is None:
            raise ValueError("This Session has no remote buffers on disk (give it remote_dir, or POPXL_REMOTE_DIR)")
        disk.events = []
        return disk.events

    @property
    def replica_mode(self) -> str:
        """How replicas execute: 'devices' or 'simulate'."""
        return self._program.mode

    def expected_inputs(self) -> list[HostToDeviceStream]:
        """The host-to-device streams `run` needs data for."""
        return list(self._program.h2d)

    def __enter__(self) -> Session:
        if self._attached == 0:
            values = _on_device(self._host.held())
            handing = Handing(self._host, values) if self.weights_to_host_on_exit else None
            self._state = self._program.init_state(values, handing)
            del values
            self._host.stale = False
            if self.weights_to_host_on_exit:
                self._host.hand_over()
            fit.give_back_freed_memory()
        self._attached += 1
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self._attached == 1 and exc_type is None and self.weights_to_host_on_exit:
            self.weights_to_host()
        self._attached -= 1
        if self._attached == 0:
            self._take_back()
            self._state = None

    def _take_back(self) -> None:
        """Read back what only the devices hold (leaving after an error too, which popxl leaves unread: here the
        host copies went at attach), and give the variables their host values again."""
        missing = self._host.missing()
        if missing:
            self._host.read_back(self._program.read_variables(self._state, missing))
        if self._program.disk is not None:
            self._program.disk.close()
        self._host.take_back()
        fit.give_back_freed_memory()

    def _require_attached(self, what: str) -> None:
        if not self.is_attached:
            raise ValueError(f"Must be attached to device before calling {what}: use `with session:`")

    def weights_from_host(self) -> None:
        """Copy every variable's host value to every replica."""
        self._require_attached("weights_from_host")
        self._state = self._program.with_variables(self._state, _on_device(self._host.held()))
        self._host.stale = False

    def weights_to_host(self) -> None:
        """Copy every variable's device value (first replica of each group) to the host.

        While attached, values the devices hold alone (see the class) are read when asked for instead.
        """
        if self._read_only_maps:
            raise Exception(
                "Writing data from device to host is not possible as the `ir` contains a read-only memmap "
                f"(variables {self._read_only_maps})."
            )
        self._require_attached("weights_to_host")
        self._host.read_back(self._program.read_variables(self._state, list(self._host.held())))
        self._host.stale = False

    def run(
        self, inputs: Mapping[HostToDeviceStream, Any] | None = None, downcast_inputs: bool = True
    ) -> dict[DeviceToHostStream, Array]:
        """Execute the main graph once; returns one array per device-to-host stream.

        Inputs of another numeric type than their stream's are converted to it (64-bit data narrows, as in
        popxl) unless `downcast_inputs` is False, which refuses them.
        """
        self._require_attached("run")
        feeds = self._validated_inputs(dict(inputs or {}), downcast_inputs)
        new_state, outputs, error = self._program.run(self._state, feeds)
        self._state = new_state
        if error is not None:
            raise error
        # The host values the devices have moved past are stale, and dropped where the devices hold them alone.
        self._host.stale = True
        self._host.hand_over_again()
        layout = self.host_layout
        return {s: dtypes.host_view(layout.from_replica_major(outputs[s.tensor_id])) for s in self._program.d2h}

    def create_host_outputs(self) -> dict[DeviceToHostStream, Array]:
        """Zeroed host arrays for every device-to-host stream, in the layout `run` returns."""
        return {s: np.zeros(self.host_layout.shape(s.shape), dtypes.host_numpy(s.dtype)) for s in self._program.d2h}

    def run_with_outputs(
        self, inputs: Mapping[HostToDeviceStream, Any] | None, outputs: Mapping[DeviceToHostStream, Array]
    ) -> None:
        """Execute the main graph once, writing the results into the given host arrays."""
        for stream, array in outputs.items():
            want = self.host_layout.shape(stream.shape)
            host = dtypes.host_numpy(stream.dtype)
            if not isinstance(array, np.ndarray) or array.shape != want or array.dtype != host:
                raise ValueError(f"Output array for stream '{stream.tensor_id}' must be {host} of shape {want}")
        missing = [s.tensor_id for s in self._program.d2h if s not in outputs]
        if missing:
            raise ValueError(f"run_with_outputs needs arrays for streams {missing}")
        for stream, result in self.run(inputs).items():
            outputs[stream][...] = result

    def _validated_inputs(self, inputs: dict[HostToDeviceStream, Any], downcast: bool = True) -> dict[str, Array]:
        expected = self._program.h2d
        unexpected = [s for s in inputs if not any(s is e for e in expected)]
        missing = [s for s in expected if s not in inputs]
        if unexpected or missing:
            raise ValueError(
                "Session.run inputs do not match the program's streams.\n"
                f"  unexpected: {[getattr(s, 'tensor_id', s) for s in unexpected]}\n"
                f"  missing: {[s.tensor_id for s in missing]}"
            )
        return {s.tensor_id: self._to_replica_major(s, inputs[s], downcast) for s in expected}

    @property
    def local_replicas(self) -> int:
        """Replicas whose host data this process feeds and receives (all of them in one process): popxl's
        `ir.instance_replication_factor`, which sizes the host arrays' replica axis."""
        return self._program.placement.local_replicas

    @property
    def host_layout(self) -> HostLayout:
        """How host arrays for `run` are laid out (transfers axis, replica axis, stream shape)."""
        # num_host_transfers may still change after the Session is created, as in popxl.
        return HostLayout(self.ir.num_host_transfers, self.ir.replication_factor, self.local_replicas)

    def _full_input_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The host shape of data for a stream of `shape`, as popxl gives it: `(num_host_transfers,)` first
        when there are several transfers, then `(local replicas,)` when this process runs more than one
        replica (popxl's `ir.instance_replication_factor > 1`), then `shape`."""
        return self.host_layout.shape(tuple(shape))

    def _to_replica_major(self, stream: HostToDeviceStream, data: Any, downcast: bool = True) -> Array:
        layout = self.host_layout
        arr = to_numpy(data, downcast=False, copy=False)
        want = layout.shape(stream.shape)
        if arr.dtype != dtypes.host_numpy(stream.dtype):
            if not downcast or arr.dtype.kind not in "biuf" or dtypes.as_dtype(arr.dtype) is not stream.dtype:
                raise ValueError(
                    f"Input for stream '{stream.tensor_id}' has dtype {arr.dtype}, expected "
                    f"{stream.dtype.as_numpy()} with shape {want}"
                )
            arr = arr.astype(stream.dtype.as_numpy())
        if not layout.accepts(stream.shape, arr.shape):
            raise ValueError(
                f"Input for stream '{stream.tensor_id}' has shape {arr.shape}, expected {want} "
                f"(num_host_transfers={layout.num_host_transfers}, local replicas={layout.local_replicas}, "
                f"stream shape {stream.shape})"
            )
        return dtypes.device_view(layout.to_replica_major(layout.conform(stream.shape, arr)))

    def traced(self, inputs: Mapping[HostToDeviceStream, Any] | None = None) -> Any:
        """The program's step as JAX traces it for these inputs (`jax.stages.Traced`: `.jaxpr`, `.lower()`)."""
        self._require_attached("traced")
        return self._program.traced(self._state, self._validated_inputs(dict(inputs or {})))

    def memory_analysis(self, inputs: Mapping[HostToDeviceStream, Any] | None = None) -> dict[str, int]:
        """Memory figures of the compiled program, in bytes per device.

        `device_bytes` and `host_bytes` are what the program holds in device and
        in host memory while it runs: its arguments and outputs in that memory,
        less the arguments it updates in place, plus XLA's temporaries there
        (and the disk tier's staging, in host memory). XLA's own figures follow:
        `temp`, `host_temp`, `argument`, `output`, `alias` and `code`, and
        `library_temp`, the bound on what a library fusion allocates itself.
        `disk_bytes` is the size of the remote buffers' files on disk, and
        `disk_staging` the staging's part of `host_bytes`.
        """
        self._require_attached("memory_analysis")
        return self._program.memory(self._state, self._validated_inputs(dict(inputs or {})))

    def check_memory(self, inputs: Mapping[HostToDeviceStream, Any] | None = None) -> None:
        """Raise `popxl.OutOfMemoryError` if a run with these inputs would not fit the memory this machine has.

        Every run checks this first (and every attach, for the state): the
        error gives the bytes needed and available, the largest buffers by
        name and what to change. `POPXL_MEMORY_CHECK=0` turns the checks off.
        """
        self._require_attached("check_memory")
        self._program.require_fit(self._state, self._validated_inputs(dict(inputs or {})))

    def write_variable_data(self, tensor: Variable, data: Any) -> None:
        """Set the host value of `tensor` (and the device value when attached)."""
        self.write_variables_data({tensor: data})

    def write_variables_data(self, tensors: Mapping[Variable, Any]) -> None:
        """Set the host values of several variables (and their device values when attached)."""
        checked: dict[Variable, Array] = {}
        for given, data in tensors.items():
            var = self._program.state.host_variable(given, "write")
            if var.retrieval_mode == "all_replicas" and var.replica_grouping.group_size > 1:
                raise NotImplementedError(
                    f'Copying to tensor {var.id} with "all_replicas" retrieval mode is not yet supported.'
                )
            host = dtypes.host_numpy(var.dtype)
            arr = np.asarray(data, dtype=host) if np.isscalar(data) else np.asarray(data)
            if arr.dtype != host:
                raise TypeError(f"Data for {var.id} has dtype {arr.dtype}, expected {host}")
            if arr.shape != var.shape_on_host:
                raise ValueError(f"Data for {var.id} has shape {arr.shape}, expected {var.shape_on_host}")
            checked[var] = arr.copy()
        if self.is_attached and self._host.stale:
            self.weights_to_host()
        self._host.replace(checked)
        if self.is_attached:
            self._state = self._program.with_variables(self._state, _on_device(checked))
            self._host.hand_over_again()

    def _on_disk(self, value: Array) -> bool:
        """Whether `value` is a view of a file of this Session's disk tier."""
        return self._program.disk is not None and self._program.disk.holds(value)

    def _every_replica(self, var: Variable) -> Array:
        """Each replica's value of `var`, in replica order (popxl's "all_replicas" retrieval)."""
        if self.is_attached:
            return dtypes.host_view(self._program.replica_rows(self._state, var))
        held = self._host.value(var)
        assert held is not None  # detached: every value is on the host
        return self._program.state.replica_values(var, held)

    def get_tensor_data(self, tensor: Tensor) -> Array:
        """The host value of a Variable or Constant."""
        return self.get_tensors_data([tensor])[tensor]

    def get_tensors_data(self, tensors: Iterable[Tensor]) -> dict[Tensor, Array]:
        """The host values of Variables and Constants."""
        out: dict[Tensor, Array] = {}
        for t in tensors:
            if isinstance(t, Constant):
                out[t] = dtypes.host_view(t.data.copy())
            elif isinstance(t, Variable):
                t = self._program.state.host_variable(t, "read")
                if self.is_attached and self._host.stale:
                    self.weights_to_host()
                held = self._host.value(t)
                if t.retrieval_mode == "all_replicas" and t.replica_grouping.group_size > 1:
                    out[t] = self._every_replica(t)
                elif held is None:  # held on the devices alone: a new array, the caller's own
                    value = self._program.read_variables(self._state, [t])[t]
                    out[t] = dtypes.host_view(value.copy() if self._on_disk(value) else value)
                elif self._on_disk(held):  # a view of a file the next run writes
                    out[t] = held.copy()
                else:
                    out[t] = held if isinstance(held, np.memmap) else held.copy()
            else:
                raise TypeError(f"Tensor {getattr(t, 'id', t)} is not of type Constant or Variable")
        return out


def _on_device(host: Mapping[Variable, Array]) -> dict[Variable, Array]:
    """Host values as the program takes them (float8 bytes as XLA's float8 types)."""
    return {v: dtypes.device_view(np.asarray(a)) for v, a in host.items()}
