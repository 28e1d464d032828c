"""Writing files so that nothing is lost: atomic replace, per-process work folders, stale ones cleaned.

Every file a user keeps (a store's payload, prepared arrays, run results) is written to
a temporary name in its own folder and renamed over the final name, so a reader sees
the old file or the new one, never half of one, and a folder can be saved onto itself
(a memory map of the old file keeps its pages after the rename). Long jobs work in a
folder ``<final>.tmp-<host>-<pid>`` beside their result; it is removed when the job
ends, however it ends short of SIGKILL, and folders of dead processes on this host are
removed by the next job that works beside the same result.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Union

import numpy as np

__all__ = ["atomic_write", "write_bytes", "write_text", "save_npy", "read_json", "work_dir", "replace_dir",
           "remove_stale", "pid_alive"]

PathLike = Union[str, os.PathLike]
_TMP = ".tmp-"


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError as e:
        return e.errno != errno.ESRCH
    return True


def _temp_name(final: Path) -> Path:
    return final.with_name(f"{final.name}{_TMP}{socket.gethostname()}-{os.getpid()}")


def remove_stale(final: Path) -> list[Path]:
    """Remove ``<final>.tmp-<this host>-<pid>`` files and folders whose process is gone; return them."""
    final = Path(final)
    prefix = f"{final.name}{_TMP}{socket.gethostname()}-"
    removed = []
    if not final.parent.is_dir():
        return removed
    for p in final.parent.glob(f"{final.name}{_TMP}*"):
        if not p.name.startswith(prefix):
            continue  # another machine's (shared disk): its own next run cleans it
        pid = p.name[len(prefix):]
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        removed.append(p)
    return removed


@contextlib.contextmanager
def atomic_write(path: PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path`, on failure it is removed."""
    final = Path(path)
    remove_stale(final)
    tmp = _temp_name(final)
    try:
        yield tmp
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_bytes(path: PathLike, data: bytes) -> Path:
    """Write `data` to `path` atomically."""
    with atomic_write(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically."""
    return write_bytes(path, text.encode())


def save_npy(path: PathLike, array: np.ndarray) -> Path:
    """``np.save`` to `path` atomically (the name is kept exactly: no .npy is appended)."""
    with atomic_write(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array, allow_pickle=False)
    return Path(path)


def read_json(path: PathLike, error: type = ValueError, fix: str = "") -> dict:
    """The JSON mapping in `path`, or `error` naming the file and what it holds instead (then `fix`)."""
    path = Path(path)
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise error(f"{path} is not readable JSON ({e}){fix}") from None
    if not isinstance(value, dict):
        raise error(f"{path} holds a {type(value).__name__}; expected a mapping{fix}")
    return value


@contextlib.contextmanager
def work_dir(final: PathLike) -> Iterator[Path]:
    """A fresh folder ``<final>.tmp-<host>-<pid>`` beside `final`, removed when the block ends.

    Folders that dead processes of this host left beside `final` (SIGKILL, power loss)
    are removed first. Move the result into place with `replace_dir` inside the block.
    """
    final = Path(final)
    remove_stale(final)
    remove_stale(final.with_name(final.name + ".old"))  # replace_dir's, if it was killed mid-way
    tmp = _temp_name(final)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def replace_dir(tmp: Path, final: Path, *, keep: Callable[[Path], bool] = lambda p: False) -> Path:
    """Move a finished work folder into place, replacing what is there.

    When ``keep(final)`` is true (a finished result another process moved into place
    meanwhile: several machines preparing on one shared disk) `final` wins and `tmp` is
    discarded. The folder it replaces is renamed aside first and removed after, so a
    crash in between leaves one of the two complete, never a half-deleted folder.
    """
    tmp, final = Path(tmp), Path(final)
    if keep(final):
        shutil.rmtree(tmp)
        return final
    old = None
    if final.exists() or final.is_symlink():
        old = _temp_name(final.with_name(final.name + ".old"))
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)
    return final
