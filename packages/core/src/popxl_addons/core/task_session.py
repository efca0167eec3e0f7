"""popxl-addons' `TaskSession`: a Session with named inputs, outputs and state, and checkpoints of that state.

A checkpoint folder holds `model/<name>.npz` per state variable (a
memory-mapped variable's file is copied instead, as `model/<file>.npy`), the
dataloader's state if one is set (`dataloader.bin`), and the session state
(`session_info.json`, always with the number of steps run). Weights & Biases
checkpoints (`wandb://...`) are not supported.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

import popxl
from popxl_addons.core.dot_tree import DotTree
from popxl_addons.core.named_tensors import NamedTensors
from popxl_addons.core.streams import InputStreams, OutputStreams

ReportMissing = Literal["none", "warn", "error"]
_SESSION_FILE = "session_info.json"
_DATALOADER_FILE = "dataloader.bin"

logger = logging.getLogger(__name__)


class NamedTensorData(DotTree[np.ndarray]):
    """Host arrays under dotted names (a state's values)."""


def write_variables_pb(session: popxl.Session, weights: Mapping[popxl.Variable, np.ndarray]) -> None:
    """Write `weights` into `session`'s variables (popxl-addons' name for `write_variables_data`)."""
    session.write_variables_data(weights)


def _local_dir(path: str) -> Path:
    if str(path).startswith("wandb://"):
        raise ValueError(f"Checkpoint {path!r}: Weights & Biases checkpoints are not supported here")
    return Path(path).expanduser()


class TaskSession(popxl.Session):
    """A Session for one task: its `inputs` and `outputs` streams by name, and its `state` variables, which
    `save_checkpoint` and `load_checkpoint` write to and read from a folder."""

    def __init__(
        self,
        inputs: InputStreams | Iterable[popxl.HostToDeviceStream],
        outputs: OutputStreams | Iterable[popxl.DeviceToHostStream],
        state: NamedTensors,
        max_checkpoints: int = 1,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.inputs = inputs if isinstance(inputs, InputStreams) else InputStreams.from_streams(inputs)
        self.outputs = outputs if isinstance(outputs, OutputStreams) else OutputStreams.from_streams(outputs)
        self.state = state
        self.session_state: dict[str, Any] = {"steps": 0}
        self._dataloader: Any = None
        self._checkpoints: deque[Path] = deque()
        self._max_checkpoints = max_checkpoints

    @property
    def dataloader(self) -> Any:
        """The dataloader whose position checkpoints keep (anything with `save` and `resume`)."""
        if self._dataloader is None:
            logger.warning("No dataloader set. Checkpoint support is incomplete. You won't be able to resume training.")
        return self._dataloader

    @dataloader.setter
    def dataloader(self, dl: Any) -> None:
        if not (hasattr(dl, "save") and hasattr(dl, "resume")):
            raise ValueError("Dataloader must implement save and resume methods")
        self._dataloader = dl

    def add_session_state_info(self, info: Mapping[str, Any]) -> None:
        """Add entries (JSON values) that checkpoints keep, such as a learning-rate schedule's position."""
        self.session_state.update(info)

    def get_named_tensors_data(self) -> NamedTensorData:
        """The state variables' current values, under their names."""
        values = self.get_tensors_data(self.state.tensors)
        return NamedTensorData.from_dict({name: values[t] for name, t in self.state.to_dict().items()})

    def load_from_session(self, src: TaskSession, report_missing: ReportMissing = "none") -> None:
        """Copy the values of `src`'s state into this session's variables of the same names."""
        loaded = src.get_tensors_data(src.state.tensors)
        _report_missing(src.state.to_dict().keys(), self.state.to_dict().keys(), report_missing)
        mapping = src.state.to_mapping(self.state)
        self.write_variables_data(
            {mapping[t]: v for t, v in loaded.items() if isinstance(mapping.get(t), popxl.Variable)}
        )

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        """Write the state, the dataloader's position and the session state to `checkpoint_dir`, deleting the
        oldest checkpoint this session wrote once there are more than `max_checkpoints`."""
        state = self.get_named_tensors_data().to_dict()
        folder = _local_dir(checkpoint_dir)
        (folder / "model").mkdir(parents=True, exist_ok=True)
        if len(self._checkpoints) >= self._max_checkpoints:
            shutil.rmtree(self._checkpoints.popleft(), ignore_errors=True)
        for name, value in state.items():
            if isinstance(value, np.memmap) and value.filename is not None:
                value.flush()
                shutil.copyfile(value.filename, folder / "model" / Path(value.filename).name)
            else:
                arrays: dict[str, Any] = {name: np.asarray(value)}
                np.savez(folder / "model" / f"{name}.npz", **arrays)
        if self._dataloader is not None:
            self._dataloader.save(str(folder / _DATALOADER_FILE))
        (folder / _SESSION_FILE).write_text(json.dumps(self.session_state))
        self._checkpoints.append(folder)

    def load_checkpoint(
        self, checkpoint_dir: str, report_missing: ReportMissing = "warn", skip_memmap: bool = False
    ) -> None:
        """Write the values saved in `checkpoint_dir` into the state variables of the same names, and restore
        the dataloader's position and the session state (`skip_memmap` is accepted for popxl-addons' API)."""
        folder = _local_dir(checkpoint_dir)
        variables = self.state.to_dict()
        saved = {p.stem: p for p in (folder / "model").glob("*.npz")}
        _report_missing(saved.keys(), variables.keys(), report_missing)
        data: dict[popxl.Variable, Any] = {}
        for name, path in saved.items():
            var = variables.get(name)
            if isinstance(var, popxl.Variable):
                with np.load(path) as archive:
                    data[var] = archive[name]
        self.write_variables_data(data)
        if self._dataloader is not None:
            self._dataloader.resume(filename=str(folder / _DATALOADER_FILE))
        info = folder / _SESSION_FILE
        loaded = json.loads(info.read_text()) if info.exists() else {"steps": 0}
        _report_missing(loaded.keys(), self.session_state.keys(), report_missing)
        self.session_state = loaded

    def run(
        self, inputs: Mapping[popxl.HostToDeviceStream, Any] | None = None, downcast_inputs: bool = True
    ) -> dict[popxl.DeviceToHostStream, np.ndarray]:
        """`Session.run`, counting the steps run in the session state."""
        self.session_state["steps"] += 1
        return super().run(inputs, downcast_inputs)


def _report_missing(found: Iterable[str], wanted: Iterable[str], method: ReportMissing) -> None:
    if method == "none":
        return
    found, wanted = set(found), set(wanted)
    lines = []
    if found - wanted:
        lines.append(f"Checkpoint keys not in state: {sorted(found - wanted)}")
    if wanted - found:
        lines.append(f"state keys not in checkpoint: {sorted(wanted - found)}")
    if lines:
        if method == "error":
            raise ValueError("\n".join(lines))
        logger.warning("\n".join(lines))


def initialise_memmap_dir_from_checkpoint(checkpoint_dir: str, memmap_dir: str) -> None:
    """Copy the memory-mapped variables' files of a checkpoint into `memmap_dir`."""
    target = Path(memmap_dir)
    target.mkdir(parents=True, exist_ok=True)
    for path in (_local_dir(checkpoint_dir) / "model").glob("*.npy"):
        shutil.copyfile(path, target / path.name)
