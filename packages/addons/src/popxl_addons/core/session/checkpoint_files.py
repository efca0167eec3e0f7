"""A checkpoint's files: where the state, the session state and the dataloader's position are, and how each
file is checked against the state (headers and sizes, before any data is read) and then read."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

import popxl

SESSION_FILE = "session_info.json"
DATALOADER_FILE = "dataloader.bin"
MEMMAP_FILE = "memmap.json"


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded (a file missing, unreadable or not matching the state); the load
    changed nothing."""


def memmap_names(tensors: Mapping[str, popxl.Tensor]) -> dict[str, str]:
    """The file names of the memory-mapped variables among `tensors`, by state name."""
    names = {}
    for name, t in tensors.items():
        filename = getattr(t.host_data, "filename", None) if isinstance(t, popxl.Variable) and t.is_memmap else None
        if filename is not None:
            names[name] = Path(filename).name
    return names


def memmap_files(folder: Path, variables: Mapping[str, popxl.Variable]) -> dict[str, Path]:
    """The files of a checkpoint's memory-mapped variables, by state name: as `memmap.json` lists them, or for
    checkpoints without it, this state's memory-mapped variables whose file name the checkpoint holds."""
    manifest = folder / MEMMAP_FILE
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
    found = {name: folder / "model" / f for name, f in memmap_names(variables).items()}
    return {name: path for name, path in found.items() if path.is_file()}


def _expected(var: popxl.Variable) -> tuple[tuple[int, ...], np.dtype[Any]]:
    return tuple(var.shape_on_host), np.dtype(popxl.dtypes.host_numpy(var.dtype))


def check_npz(path: Path, name: str, var: popxl.Variable) -> None:
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


def check_raw(path: Path, var: popxl.Variable) -> None:
    """Check the size of a memory-mapped variable's file against `var`."""
    shape, dtype = _expected(var)
    want = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    size = path.stat().st_size
    if size != want:
        raise CheckpointError(
            f"Checkpoint file {str(path)!r} has {size} bytes, but variable {var.name!r} ({dtype} {shape}) has {want}"
        )


def read_values(path: Path, name: str | None, var: popxl.Variable) -> np.ndarray:
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


def nbytes(var: popxl.Variable) -> int:
    shape, dtype = _expected(var)
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def read_through(path: Path, name: str | None) -> None:
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


def session_info(path: Path) -> dict[str, Any]:
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
