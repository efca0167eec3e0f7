"""popxl-addons' `TaskSession`: a Session with named inputs, outputs and state, and checkpoints of that state.

A checkpoint folder holds `model/<name>.npz` per state variable (a
memory-mapped variable's file is copied instead, as `model/<file>.npy`, and
`memmap.json` maps the state names of such variables to their files), the
dataloader's state if one is set (`dataloader.bin`), the session state
(`session_info.json`, always with the number of steps run) and, written last,
the completion mark `checkpoint_complete.json` (`{"format_version": 1}`).
Weights & Biases checkpoints (`wandb://...`) are not supported.

Loads are all or nothing. A load first reads and checks every file: each
`.npz`'s array header against its variable's shape and dtype (before any of
its data is read or inflated), each memory-mapped variable's file size, the
session state (a JSON object with the number of steps) and the dataloader's
file where a dataloader is set. Only then does it read the values, resume the
dataloader and write the variables and the session state; anything wrong
raises `CheckpointError` naming the file and leaves the session as it was.

Checkpoints survive a crash or a full disk. A save writes the whole checkpoint
into a hidden folder beside the destination (`.<name>.partial-<host>-<pid>-<id>`,
on the same filesystem), fsyncs it, writes the mark, and only then renames it
into place. Saving over an existing checkpoint renames the old one aside
(`.<name>.old-...`), renames the new one in and then deletes the old one; the
oldest checkpoint beyond `max_checkpoints` is deleted only once the new one is
in place. A save that fails midway raises, leaving the previous checkpoints as
they were. Loads refuse a folder without the mark (`IncompleteCheckpointError`)
and never read the hidden folders, except that a checkpoint whose save died
between its two renames is read from its `.old-` copy; the next save into the
same parent folder deletes the leftovers of saves whose process is gone (on
this host), putting such an `.old-` copy back in place.

Checkpoints written before the mark existed, popxl-addons' included, have no
mark, and a complete one cannot be told apart from a partial one: loads refuse
them too. Once you know such a checkpoint is complete, `mark_checkpoint_complete`
marks it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

import popxl
from popxl_addons.core.modules.dot_tree import DotTree
from popxl_addons.core.modules.named_tensors import NamedTensors
from popxl_addons.core.session.checkpoint_files import (
    DATALOADER_FILE,
    MEMMAP_FILE,
    SESSION_FILE,
    check_npz,
    check_raw,
    memmap_files,
    memmap_names,
    nbytes,
    read_through,
    read_values,
    session_info,
)
from popxl_addons.core.session.checkpoint_files import CheckpointError as CheckpointError
from popxl_addons.core.session.checkpoint_folders import IncompleteCheckpointError as IncompleteCheckpointError
from popxl_addons.core.session.checkpoint_folders import (
    check_replaceable,
    clean_leftovers,
    complete_checkpoint,
    delete_checkpoint,
    discard,
    fsync,
    leftover_path,
    local_dir,
    move_into_place,
    write_mark,
)
from popxl_addons.core.session.checkpoint_folders import mark_checkpoint_complete as mark_checkpoint_complete
from popxl_addons.core.session.streams import InputStreams, OutputStreams

__all__ = ["TaskSession", "write_variables_pb", "NamedTensorData", "initialise_memmap_dir_from_checkpoint"]

ReportMissing = Literal["none", "warn", "error"]

logger = logging.getLogger(__name__)


class NamedTensorData(DotTree[np.ndarray]):
    """Host arrays under dotted names (a state's values)."""


def write_variables_pb(session: popxl.Session, weights: Mapping[popxl.Variable, np.ndarray]) -> None:
    """Write `weights` into `session`'s variables (popxl-addons' name for `write_variables_data`)."""
    session.write_variables_data(weights)


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
        """Write the state, the dataloader's position and the session state to `checkpoint_dir`, whole or not at
        all, then delete the oldest checkpoint this session wrote once there are more than `max_checkpoints`."""
        # Read one variable at a time as it is written: state on disk may be larger than memory.
        tensors = self.state.to_dict()
        folder = Path(os.path.abspath(local_dir(checkpoint_dir)))
        if folder.exists() or folder.is_symlink():
            check_replaceable(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        clean_leftovers(folder.parent)
        maps = memmap_names(self.state.to_dict())
        clashes = sorted(f for f in set(maps.values()) if list(maps.values()).count(f) > 1)
        if clashes:
            raise ValueError(f"Cannot save a checkpoint: memory-mapped variables share the file names {clashes}")
        partial = leftover_path(folder, "partial")
        partial.mkdir()
        try:
            (partial / "model").mkdir()
            for name, tensor in tensors.items():
                value = self.get_tensor_data(tensor)
                if name in maps:
                    # The map's bytes, as the Session reads the value (the map itself, or a copy of it).
                    np.ascontiguousarray(value).tofile(partial / "model" / maps[name])
                else:
                    arrays: dict[str, Any] = {name: np.asarray(value)}
                    np.savez(partial / "model" / f"{name}.npz", **arrays)
            if maps:
                (partial / MEMMAP_FILE).write_text(json.dumps(maps))
            if self._dataloader is not None:
                self._dataloader.save(str(partial / DATALOADER_FILE))
            (partial / SESSION_FILE).write_text(json.dumps(self.session_state))
            # Everything is on disk before the mark, and the mark before the rename.
            for path in sorted(partial.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                fsync(path)
            write_mark(partial)
            move_into_place(partial, folder)
        except BaseException:
            discard(partial)
            raise
        if folder in self._checkpoints:
            self._checkpoints.remove(folder)
        self._checkpoints.append(folder)
        while len(self._checkpoints) > max(self._max_checkpoints, 1):
            delete_checkpoint(self._checkpoints.popleft())

    def load_checkpoint(
        self, checkpoint_dir: str, report_missing: ReportMissing = "warn", skip_memmap: bool = False
    ) -> None:
        """Write the values saved in `checkpoint_dir` into the state variables of the same names, and restore
        the dataloader's position and the session state, all or nothing (`CheckpointError` naming the file).

        Memory-mapped variables are loaded into their maps; `skip_memmap` leaves them as they are (for maps
        initialised with `initialise_memmap_dir_from_checkpoint`), and a read-only map is refused without it."""
        folder = complete_checkpoint(local_dir(checkpoint_dir))
        names = self.state.to_dict()
        variables = {n: t for n, t in names.items() if isinstance(t, popxl.Variable)}
        saved = {p.stem: p for p in (folder / "model").glob("*.npz")}
        maps = memmap_files(folder, variables)
        _report_missing({*saved, *maps}, names.keys(), report_missing)
        # Check every file before anything is read whole or written.
        sources: dict[popxl.Variable, tuple[Path, str | None]] = {}
        for name, var in variables.items():
            if var.is_memmap and (skip_memmap or (name not in saved and name not in maps)):
                continue
            if var.is_memmap and not var.host_data.flags.writeable:
                raise CheckpointError(
                    f"Checkpoint {str(folder)!r}: variable {name!r} is a read-only memory map, which a load cannot "
                    "write; pass skip_memmap=True (initialising its folder with "
                    "initialise_memmap_dir_from_checkpoint), or map it writable"
                )
            if name in saved:
                check_npz(saved[name], name, var)
                sources[var] = (saved[name], name)
            elif name in maps:
                check_raw(maps[name], var)
                sources[var] = (maps[name], None)
        loaded = session_info(folder / SESSION_FILE)
        _report_missing(loaded.keys(), self.session_state.keys(), report_missing)
        dataloader = folder / DATALOADER_FILE
        if self._dataloader is not None and not dataloader.is_file():
            raise CheckpointError(
                f"Checkpoint file {str(dataloader)!r} is missing: it holds the position of the dataloader set on "
                "this session"
            )
        # Read whole before anything is written where memory holds it all; else (state on disk, larger than
        # memory) every file is read through first, its checksums checked, and then loaded one at a time.
        streamed = sum(nbytes(v) for v in sources) > _memory_available() // 2
        if streamed:
            for path, member in sources.values():
                read_through(path, member)
        data = {} if streamed else {var: read_values(path, m, var) for var, (path, m) in sources.items()}
        if self._dataloader is not None:
            try:
                self._dataloader.resume(filename=str(dataloader))
            except Exception as e:
                raise CheckpointError(f"Checkpoint file {str(dataloader)!r}: the dataloader cannot resume: {e}") from e
        if streamed:
            for var, (path, member) in sources.items():
                self.write_variables_data({var: read_values(path, member, var)})
        else:
            self.write_variables_data(data)
        self.session_state = loaded

    def run(
        self, inputs: Mapping[popxl.HostToDeviceStream, Any] | None = None, downcast_inputs: bool = True
    ) -> dict[popxl.DeviceToHostStream, np.ndarray]:
        """`Session.run`, counting the steps run in the session state."""
        self.session_state["steps"] += 1
        return super().run(inputs, downcast_inputs)


def _memory_available() -> int:
    """The bytes of memory the OS says are free for new data."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0


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
    for path in (complete_checkpoint(local_dir(checkpoint_dir)) / "model").glob("*.npy"):
        shutil.copyfile(path, target / path.name)
