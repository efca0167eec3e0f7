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

# This module is long because the all-or-nothing checkpoint checks (headers, JSON, maps) sit beside the
# Session; the layout issue (40) moves them into a checkpoint module of their own.

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import os
import re
import secrets
import shutil
import socket
import zipfile
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

import popxl
from popxl_addons.core.modules.dot_tree import DotTree
from popxl_addons.core.modules.named_tensors import NamedTensors
from popxl_addons.core.session.streams import InputStreams, OutputStreams

__all__ = ["TaskSession", "write_variables_pb", "NamedTensorData", "initialise_memmap_dir_from_checkpoint"]

ReportMissing = Literal["none", "warn", "error"]
_SESSION_FILE = "session_info.json"
_DATALOADER_FILE = "dataloader.bin"
_MARK_FILE = "checkpoint_complete.json"
_MEMMAP_FILE = "memmap.json"
_FORMAT_VERSION = 1
# Leftovers of saves: `.<name>.<kind>-<host>-<pid>-<id>` beside the checkpoint `<name>`.
_LEFTOVER = re.compile(r"\.(?P<name>.+)\.(?P<kind>partial|old|trash)-(?P<host>[\w.-]+)-(?P<pid>\d+)-[0-9a-f]{8}")
_HOST = re.sub(r"[^\w.-]", "_", socket.gethostname()) or "host"

logger = logging.getLogger(__name__)


class IncompleteCheckpointError(ValueError):
    """A checkpoint folder without the completion mark: its save was interrupted, or it predates the mark."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded (a file missing, unreadable or not matching the state); the load
    changed nothing."""


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
        """Write the state, the dataloader's position and the session state to `checkpoint_dir`, whole or not at
        all, then delete the oldest checkpoint this session wrote once there are more than `max_checkpoints`."""
        # Read one variable at a time as it is written: state on disk may be larger than memory.
        tensors = self.state.to_dict()
        folder = Path(os.path.abspath(_local_dir(checkpoint_dir)))
        if folder.exists() or folder.is_symlink():
            _check_replaceable(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        _clean_leftovers(folder.parent)
        maps = _memmap_names(self.state.to_dict())
        clashes = sorted(f for f in set(maps.values()) if list(maps.values()).count(f) > 1)
        if clashes:
            raise ValueError(f"Cannot save a checkpoint: memory-mapped variables share the file names {clashes}")
        partial = _leftover_path(folder, "partial")
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
                (partial / _MEMMAP_FILE).write_text(json.dumps(maps))
            if self._dataloader is not None:
                self._dataloader.save(str(partial / _DATALOADER_FILE))
            (partial / _SESSION_FILE).write_text(json.dumps(self.session_state))
            # Everything is on disk before the mark, and the mark before the rename.
            for path in sorted(partial.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                _fsync(path)
            _write_mark(partial)
            _move_into_place(partial, folder)
        except BaseException:
            _discard(partial)
            raise
        if folder in self._checkpoints:
            self._checkpoints.remove(folder)
        self._checkpoints.append(folder)
        while len(self._checkpoints) > max(self._max_checkpoints, 1):
            _delete_checkpoint(self._checkpoints.popleft())

    def load_checkpoint(
        self, checkpoint_dir: str, report_missing: ReportMissing = "warn", skip_memmap: bool = False
    ) -> None:
        """Write the values saved in `checkpoint_dir` into the state variables of the same names, and restore
        the dataloader's position and the session state, all or nothing (`CheckpointError` naming the file).

        Memory-mapped variables are loaded into their maps; `skip_memmap` leaves them as they are (for maps
        initialised with `initialise_memmap_dir_from_checkpoint`), and a read-only map is refused without it."""
        folder = _complete_checkpoint(_local_dir(checkpoint_dir))
        names = self.state.to_dict()
        variables = {n: t for n, t in names.items() if isinstance(t, popxl.Variable)}
        saved = {p.stem: p for p in (folder / "model").glob("*.npz")}
        maps = _memmap_files(folder, variables)
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
                _check_npz(saved[name], name, var)
                sources[var] = (saved[name], name)
            elif name in maps:
                _check_raw(maps[name], var)
                sources[var] = (maps[name], None)
        loaded = _session_info(folder / _SESSION_FILE)
        _report_missing(loaded.keys(), self.session_state.keys(), report_missing)
        dataloader = folder / _DATALOADER_FILE
        if self._dataloader is not None and not dataloader.is_file():
            raise CheckpointError(
                f"Checkpoint file {str(dataloader)!r} is missing: it holds the position of the dataloader set on "
                "this session"
            )
        # Read whole before anything is written where memory holds it all; else (state on disk, larger than
        # memory) every file is read through first, its checksums checked, and then loaded one at a time.
        streamed = sum(_nbytes(v) for v in sources) > _memory_available() // 2
        if streamed:
            for path, member in sources.values():
                _read_through(path, member)
        data = {} if streamed else {var: _read_values(path, m, var) for var, (path, m) in sources.items()}
        if self._dataloader is not None:
            try:
                self._dataloader.resume(filename=str(dataloader))
            except Exception as e:
                raise CheckpointError(f"Checkpoint file {str(dataloader)!r}: the dataloader cannot resume: {e}") from e
        if streamed:
            for var, (path, member) in sources.items():
                self.write_variables_data({var: _read_values(path, member, var)})
        else:
            self.write_variables_data(data)
        self.session_state = loaded

    def run(
        self, inputs: Mapping[popxl.HostToDeviceStream, Any] | None = None, downcast_inputs: bool = True
    ) -> dict[popxl.DeviceToHostStream, np.ndarray]:
        """`Session.run`, counting the steps run in the session state."""
        self.session_state["steps"] += 1
        return super().run(inputs, downcast_inputs)


def _memmap_names(tensors: Mapping[str, popxl.Tensor]) -> dict[str, str]:
    """The file names of the memory-mapped variables among `tensors`, by state name."""
    names = {}
    for name, t in tensors.items():
        filename = getattr(t.host_data, "filename", None) if isinstance(t, popxl.Variable) and t.is_memmap else None
        if filename is not None:
            names[name] = Path(filename).name
    return names


def _memmap_files(folder: Path, variables: Mapping[str, popxl.Variable]) -> dict[str, Path]:
    """The files of a checkpoint's memory-mapped variables, by state name: as `memmap.json` lists them, or for
    checkpoints without it, this state's memory-mapped variables whose file name the checkpoint holds."""
    manifest = folder / _MEMMAP_FILE
    if manifest.exists():
        try:
            listed = json.loads(manifest.read_text())
        except (OSError, ValueError) as e:
            raise CheckpointError(f"Checkpoint file {str(manifest)!r} is not readable JSON: {e}") from e
        if not isinstance(listed, dict) or not all(isinstance(f, str) and f == Path(f).name for f in listed.values()):
            raise CheckpointError(f"Checkpoint file {str(manifest)!r} is not an object of state names to file names")
        files = {str(n): folder / "model" / f for n, f in listed.items()}
        missing = sorted(str(p) for p in files.values() if not p.is_file())
        if missing:
            raise CheckpointError(f"Checkpoint files {missing} that {str(manifest)!r} lists are missing")
        return files
    found = {name: folder / "model" / f for name, f in _memmap_names(variables).items()}
    return {name: path for name, path in found.items() if path.is_file()}


def _expected(var: popxl.Variable) -> tuple[tuple[int, ...], np.dtype[Any]]:
    return tuple(var.shape_on_host), np.dtype(popxl.dtypes.host_numpy(var.dtype))


def _check_npz(path: Path, name: str, var: popxl.Variable) -> None:
    """Check the header of the array `name` in the .npz `path` against `var`, reading (inflating) no data."""
    member = f"{name}.npy"
    try:
        with zipfile.ZipFile(path) as archive:
            if member not in archive.namelist():
                raise CheckpointError(f"Checkpoint file {str(path)!r} holds no array {name!r}")
            with archive.open(member) as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    raise ValueError(f"unsupported .npy format version {version}")
    except CheckpointError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise CheckpointError(f"Checkpoint file {str(path)!r} is not a readable .npz: {e}") from e
    want_shape, want_dtype = _expected(var)
    if (tuple(shape), dtype) != (want_shape, want_dtype):
        raise CheckpointError(
            f"Checkpoint file {str(path)!r} holds {dtype} {tuple(shape)} for variable {name!r}, which is "
            f"{want_dtype} {want_shape}"
        )


def _check_raw(path: Path, var: popxl.Variable) -> None:
    """Check the size of a memory-mapped variable's file against `var`."""
    shape, dtype = _expected(var)
    want = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    size = path.stat().st_size
    if size != want:
        raise CheckpointError(
            f"Checkpoint file {str(path)!r} has {size} bytes, but variable {var.name!r} ({dtype} {shape}) has {want}"
        )


def _read_values(path: Path, name: str | None, var: popxl.Variable) -> np.ndarray:
    """The values of `var` in a checked file: the array `name` of an .npz, or a memory-mapped variable's file."""
    shape, dtype = _expected(var)
    try:
        if name is None:
            return np.memmap(str(path), dtype, "r", shape=shape)
        with np.load(path, allow_pickle=False) as archive:
            values: np.ndarray = archive[name]
        return values
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, io.UnsupportedOperation) as e:
        raise CheckpointError(f"Checkpoint file {str(path)!r} cannot be read: {e}") from e


def _nbytes(var: popxl.Variable) -> int:
    shape, dtype = _expected(var)
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def _memory_available() -> int:
    """The bytes of memory the OS says are free for new data."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0


def _read_through(path: Path, name: str | None) -> None:
    """Read the array `name` of the .npz `path` to its end without keeping it, so that its checksum is checked
    (a raw memory-mapped file has none, and its size was checked already)."""
    if name is None:
        return
    try:
        with zipfile.ZipFile(path) as archive, archive.open(f"{name}.npy") as f:
            while f.read(16 * 2**20):
                pass
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise CheckpointError(f"Checkpoint file {str(path)!r} cannot be read: {e}") from e


def _session_info(path: Path) -> dict[str, Any]:
    """The session state saved in `path`: a JSON object with the number of steps run. A checkpoint without the
    file starts from no steps, as popxl-addons' loads it; one whose file is not such an object is refused."""
    try:
        loaded = json.loads(path.read_text())
    except FileNotFoundError:
        return {"steps": 0}
    except (OSError, ValueError) as e:
        raise CheckpointError(f"Checkpoint file {str(path)!r} is not readable JSON: {e}") from e
    if not isinstance(loaded, dict) or not isinstance(loaded.get("steps"), int) or isinstance(loaded["steps"], bool):
        raise CheckpointError(
            f"Checkpoint file {str(path)!r} must hold a JSON object with the integer number of steps run "
            f"('steps'), got {str(loaded)[:200]}"
        )
    return loaded


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
    for path in (_complete_checkpoint(_local_dir(checkpoint_dir)) / "model").glob("*.npy"):
        shutil.copyfile(path, target / path.name)


def mark_checkpoint_complete(checkpoint_dir: str) -> None:
    """Mark `checkpoint_dir` complete, for a checkpoint known to be whole that was saved without the mark (by an
    earlier version, or popxl-addons)."""
    folder = _local_dir(checkpoint_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"Checkpoint folder {str(folder)!r} does not exist")
    _write_mark(folder)


def _write_mark(folder: Path) -> None:
    (folder / _MARK_FILE).write_text(json.dumps({"format_version": _FORMAT_VERSION}))
    _fsync(folder / _MARK_FILE)
    _fsync(folder)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:
        # Some filesystems cannot fsync a directory; its files are synced all the same.
        if not (path.is_dir() and e.errno in (errno.EINVAL, errno.ENOTSUP, errno.EBADF)):
            raise
    finally:
        os.close(fd)


def _complete_checkpoint(folder: Path) -> Path:
    """The folder to read the checkpoint `folder` from, once it is known to be complete."""
    if not folder.is_dir():
        for path, name, kind, _, _ in _leftovers(folder.parent):
            if name == folder.name and kind == "old" and (path / _MARK_FILE).is_file():
                logger.warning(f"Checkpoint {str(folder)!r}: a save died while replacing it; loading {str(path)!r}")
                return path
        raise FileNotFoundError(f"Checkpoint folder {str(folder)!r} does not exist (or is not a folder)")
    mark = folder / _MARK_FILE
    if not mark.is_file():
        raise IncompleteCheckpointError(
            f"Checkpoint folder {str(folder)!r} is incomplete: it has no {_MARK_FILE!r}, the mark a save writes "
            "last, so the save that wrote it was interrupted, or it was saved before checkpoints had marks (by an "
            "earlier version, or popxl-addons). Load the previous checkpoint instead; if you know this one is "
            "whole, mark it once with "
            f"popxl_addons.core.session.task_session.mark_checkpoint_complete({str(folder)!r})."
        )
    try:
        version = json.loads(mark.read_text()).get("format_version")
    except (ValueError, AttributeError):
        version = None
    if version != _FORMAT_VERSION:
        raise ValueError(
            f"Checkpoint folder {str(folder)!r}: {_MARK_FILE!r} names format {version!r}, not {_FORMAT_VERSION}"
        )
    return folder


def _check_replaceable(folder: Path) -> None:
    """Refuse to replace anything but a checkpoint (or an empty folder), which saving to a used path would."""
    if folder.is_dir():
        entries = {p.name for p in folder.iterdir()}
        if not entries or entries & {_MARK_FILE, _SESSION_FILE, "model"}:
            return
    raise FileExistsError(f"Cannot save a checkpoint to {str(folder)!r}: it exists and is not a checkpoint folder")


def _move_into_place(partial: Path, folder: Path) -> None:
    if folder.exists() or folder.is_symlink():
        # Old aside, new in, old deleted: a crash between the renames leaves the old one, which loads find.
        old = _leftover_path(folder, "old")
        os.replace(folder, old)
        try:
            os.replace(partial, folder)
        except BaseException:
            os.replace(old, folder)
            raise
        _fsync(folder.parent)
        _discard(old)
    else:
        os.replace(partial, folder)
        _fsync(folder.parent)


def _delete_checkpoint(folder: Path) -> None:
    # Renamed away first so that a crash while deleting leaves no half-deleted folder at a checkpoint's path.
    try:
        if folder.exists():
            trash = _leftover_path(folder, "trash")
            os.replace(folder, trash)
            _discard(trash)
    except OSError as e:
        logger.warning(f"Could not delete the old checkpoint {str(folder)!r}: {e}")


def _discard(folder: Path) -> None:
    # The mark goes first: a folder left half-deleted is never loaded.
    with contextlib.suppress(OSError):
        (folder / _MARK_FILE).unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)


def _leftover_path(folder: Path, kind: str) -> Path:
    return folder.parent / f".{folder.name}.{kind}-{_HOST}-{os.getpid()}-{secrets.token_hex(4)}"


def _leftovers(parent: Path) -> list[tuple[Path, str, str, str, int]]:
    """The leftovers of saves in `parent`: (path, checkpoint name, kind, host, process id)."""
    if not parent.is_dir():
        return []
    found = []
    for path in sorted(parent.iterdir()):
        m = _LEFTOVER.fullmatch(path.name)
        if m is not None and path.is_dir():
            found.append((path, m["name"], m["kind"], m["host"], int(m["pid"])))
    return found


def _clean_leftovers(parent: Path) -> None:
    """Delete the leftovers of saves whose process is gone, putting back a replaced checkpoint left aside."""
    for path, name, kind, host, pid in _leftovers(parent):
        if _may_be_saving(host, pid):
            continue
        folder = parent / name
        if kind == "old" and not (folder.exists() or folder.is_symlink()) and (path / _MARK_FILE).is_file():
            os.replace(path, folder)
            logger.warning(f"Checkpoint {str(folder)!r}: a save died while replacing it; put the previous one back")
        else:
            _discard(path)


def _may_be_saving(host: str, pid: int) -> bool:
    # Another host's processes cannot be checked, and this process's own saves are not its leftovers to judge.
    if host != _HOST or pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
