"""A checkpoint folder's life: saved beside its destination and renamed into place with a completion mark,
found complete on load, deleted without leaving half a folder, and the leftovers of dead saves cleaned up
(the crash safety `task_session`'s docstring describes)."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import secrets
import shutil
import socket
from pathlib import Path

from popxl_addons.core.session.checkpoint_files import SESSION_FILE

_MARK_FILE = "checkpoint_complete.json"
_FORMAT_VERSION = 1
# Leftovers of saves: `.<name>.<kind>-<host>-<pid>-<id>` beside the checkpoint `<name>`.
_LEFTOVER = re.compile(r"\.(?P<name>.+)\.(?P<kind>partial|old|trash)-(?P<host>[\w.-]+)-(?P<pid>\d+)-[0-9a-f]{8}")
_HOST = re.sub(r"[^\w.-]", "_", socket.gethostname()) or "host"

# Its warnings are the TaskSession's: they go to that module's logger.
logger = logging.getLogger("popxl_addons.core.session.task_session")


class IncompleteCheckpointError(ValueError):
    """A checkpoint folder without the completion mark: its save was interrupted, or it predates the mark."""


def local_dir(path: str) -> Path:
    if str(path).startswith("wandb://"):
        raise ValueError(f"Checkpoint {path!r}: Weights & Biases checkpoints are not supported here")
    return Path(path).expanduser()


def mark_checkpoint_complete(checkpoint_dir: str) -> None:
    """Mark `checkpoint_dir` complete, for a checkpoint known to be whole that was saved without the mark (by an
    earlier version, or popxl-addons)."""
    folder = local_dir(checkpoint_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"Checkpoint folder {str(folder)!r} does not exist")
    write_mark(folder)


def write_mark(folder: Path) -> None:
    (folder / _MARK_FILE).write_text(json.dumps({"format_version": _FORMAT_VERSION}))
    fsync(folder / _MARK_FILE)
    fsync(folder)


def fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:
        # Some filesystems cannot fsync a directory; its files are synced all the same.
        if not (path.is_dir() and e.errno in (errno.EINVAL, errno.ENOTSUP, errno.EBADF)):
            raise
    finally:
        os.close(fd)


def complete_checkpoint(folder: Path) -> Path:
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


def check_replaceable(folder: Path) -> None:
    """Refuse to replace anything but a checkpoint (or an empty folder), which saving to a used path would."""
    if folder.is_dir():
        entries = {p.name for p in folder.iterdir()}
        if not entries or entries & {_MARK_FILE, SESSION_FILE, "model"}:
            return
    raise FileExistsError(f"Cannot save a checkpoint to {str(folder)!r}: it exists and is not a checkpoint folder")


def move_into_place(partial: Path, folder: Path) -> None:
    if folder.exists() or folder.is_symlink():
        # Old aside, new in, old deleted: a crash between the renames leaves the old one, which loads find.
        old = leftover_path(folder, "old")
        os.replace(folder, old)
        try:
            os.replace(partial, folder)
        except BaseException:
            os.replace(old, folder)
            raise
        fsync(folder.parent)
        discard(old)
    else:
        os.replace(partial, folder)
        fsync(folder.parent)


def delete_checkpoint(folder: Path) -> None:
    # Renamed away first so that a crash while deleting leaves no half-deleted folder at a checkpoint's path.
    try:
        if folder.exists():
            trash = leftover_path(folder, "trash")
            os.replace(folder, trash)
            discard(trash)
    except OSError as e:
        logger.warning(f"Could not delete the old checkpoint {str(folder)!r}: {e}")


def discard(folder: Path) -> None:
    # The mark goes first: a folder left half-deleted is never loaded.
    with contextlib.suppress(OSError):
        (folder / _MARK_FILE).unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)


def leftover_path(folder: Path, kind: str) -> Path:
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


def clean_leftovers(parent: Path) -> None:
    """Delete the leftovers of saves whose process is gone, putting back a replaced checkpoint left aside."""
    for path, name, kind, host, pid in _leftovers(parent):
        if _may_be_saving(host, pid):
            continue
        folder = parent / name
        if kind == "old" and not (folder.exists() or folder.is_symlink()) and (path / _MARK_FILE).is_file():
            os.replace(path, folder)
            logger.warning(f"Checkpoint {str(folder)!r}: a save died while replacing it; put the previous one back")
        else:
            discard(path)


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
