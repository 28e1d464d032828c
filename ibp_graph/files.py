"""Writing files so that nothing is lost: atomic replace, per-process work folders, stale ones cleaned.

Every file a user keeps (a store's payload, prepared arrays, run results) is written to
a temporary name in its own folder and renamed over the final name, so a reader sees
the old file or the new one, never half of one, and a folder can be saved onto itself
(a memory map of the old file keeps its pages after the rename). Long jobs work in a
folder ``<final>.tmp-<host>-<pid>`` beside their result; it is removed when the job
ends, however it ends short of SIGKILL, and folders of dead processes on this host are
removed by the next job that works beside the same result. Another host's (a shared disk) are
never removed, since whether their process still runs cannot be told from here: in an output
folder they are refused naming each one's path, host and pid.

Nothing a user keeps is deleted or overwritten: a finished folder is moved into place only
over an empty folder or one ibp-graph marked as its own output (`MARKER`), and `check_output`
refuses an output folder holding anything else, or overlapping its input, before any work.
Large arrays are allocated on disk before they are written through a memory map, so a full
disk is a `DiskFullError` (naming the path, the bytes needed and free), never a SIGBUS.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Optional, Union

import numpy as np

__all__ = ["atomic_write", "write_bytes", "write_text", "save_npy", "read_json", "work_dir", "replace_dir",
           "remove_stale", "pid_alive", "MARKER", "OutputFolderError", "DiskFullError", "check_output",
           "is_own_output", "note_output_entry", "check_free", "open_npy", "disk_full_error"]

PathLike = Union[str, os.PathLike]
_TMP = ".tmp-"
#: the file ibp-graph writes into every folder it moves into place: it lists the folder's entries and paths.
MARKER = ".ibp-graph-output.json"
#: meta.json formats of prepared folders written before the marker existed (prepared.py, hetero.py) ...
_UNMARKED_FORMATS = ("ibp_graph.prepared", "ibp_graph.hetero_prepared")
#: ... and the names such a folder holds at its top.
_UNMARKED_NAMES = frozenset({"meta.json", "checksums.json", "graph", "x.npy", "y.npy", "split", "store", "nodes",
                             "edges"})


class OutputFolderError(ValueError):
    """An output folder ibp-graph may not write into: it holds files it did not write, or it is its own input."""


class DiskFullError(OSError):
    """Too little free space to write something (ENOSPC): names the path, the bytes needed and the bytes free."""

    def __init__(self, path: PathLike, needed: Optional[int], free: int, what: str = ""):
        self.path, self.needed, self.free, self.what = Path(path), needed, free, what
        need = f"{needed:,} bytes ({_human(needed)})" if needed is not None else "more"
        subject = f"{what} in {self.path}" if what else str(self.path)
        super().__init__(errno.ENOSPC, f"no space left for {subject}: it needs {need}, and {free:,} "
                                       f"bytes ({_human(free)}) are free on its file system; free some space there "
                                       f"or write to a larger disk")

    def __str__(self) -> str:
        return self.strerror

    def naming(self, option: str) -> str:
        """The message, naming the `option` that chooses the disk (prepare's --out, train's data.root)."""
        return f"{self} ({option})"

    def __reduce__(self):
        return type(self), (self.path, self.needed, self.free, self.what)


def _human(nbytes: int) -> str:
    return f"{nbytes / 2**30:.3g} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.3g} MiB"


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


def _is_temp_name(name: str) -> bool:
    """Whether `name` is one `_temp_name` writes on this host: ``NAME.tmp-<this host>-<pid>``."""
    return re.fullmatch(rf".+{re.escape(_TMP + socket.gethostname())}-\d+", name) is not None


def _other_host_temp(name: str) -> Optional[tuple[str, int]]:
    """(host, pid) of a name `_temp_name` writes on another host (``NAME.tmp-<host>-<pid>``), else None."""
    m = re.fullmatch(rf".+?{re.escape(_TMP)}(.+)-(\d+)", name)
    return None if m is None or m.group(1) == socket.gethostname() else (m.group(1), int(m.group(2)))


def _stale(final: Path) -> list[Path]:
    """The ``<final>.tmp-<this host>-<pid>`` files and folders whose process is gone."""
    prefix = f"{final.name}{_TMP}{socket.gethostname()}-"
    if not final.parent.is_dir():
        return []
    # another machine's (shared disk) are left alone: its own next run cleans them
    return [p for p in final.parent.glob(f"{final.name}{_TMP}*") if p.name.startswith(prefix)
            and p.name[len(prefix):].isdigit() and not pid_alive(int(p.name[len(prefix):]))]


def remove_stale(final: Path) -> list[Path]:
    """Remove ``<final>.tmp-<this host>-<pid>`` files and folders whose process is gone; return them."""
    removed = []
    for p in _stale(Path(final)):
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
    with disk_full_error(path, len(data)), atomic_write(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically."""
    return write_bytes(path, text.encode())


def save_npy(path: PathLike, array: np.ndarray) -> Path:
    """``np.save`` to `path` atomically (the name is kept exactly: no .npy is appended)."""
    with disk_full_error(path, np.asarray(array).nbytes + _NPY_HEADER), atomic_write(path) as tmp, \
            open(tmp, "wb") as f:
        np.save(f, array, allow_pickle=False)
    return Path(path)


#: room counted for an .npy header (numpy pads it to a multiple of 64 bytes; 128 for ordinary shapes).
_NPY_HEADER = 4096


def _free_bytes(path: PathLike) -> int:
    """Free bytes (for this user) on the file system of `path`, or of its nearest existing parent."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def check_free(path: PathLike, needed: int, what: str = "") -> None:
    """DiskFullError unless the file system of `path` has `needed` bytes free (checked before long work)."""
    free = _free_bytes(path)
    if free < needed:
        raise DiskFullError(path, int(needed), free, what)


@contextlib.contextmanager
def disk_full_error(path: PathLike, needed: Optional[int] = None, what: str = "") -> Iterator[None]:
    """Turn ENOSPC (or a full quota) raised in the block into a DiskFullError naming `path` (and `what` was
    being written there) and the `needed` bytes."""
    try:
        yield
    except DiskFullError:
        raise
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise DiskFullError(path, needed, _free_bytes(path), what) from None


def open_npy(path: PathLike, dtype, shape: tuple) -> np.memmap:
    """A new .npy file at `path`, memory-mapped for writing, with its disk blocks allocated first.

    Writing through the map of a sparse file on a full disk kills the process (SIGBUS);
    allocated first, a full disk is a DiskFullError here instead. Where the file system
    cannot allocate ahead, the free space is checked.
    """
    path = Path(path)
    shape = tuple(int(v) for v in shape)
    with disk_full_error(path, int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize + _NPY_HEADER):
        array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
        _allocate(path, path.stat().st_size)
    return array


def _allocate(path: Path, size: int) -> None:
    """Reserve `size` bytes of disk for the file `path` (posix_fallocate), else check that they are free."""
    allocate = getattr(os, "posix_fallocate", None)
    if allocate is not None and size:
        fd = os.open(path, os.O_RDWR)
        try:
            allocate(fd, 0, size)
            return
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS):
                raise
        finally:
            os.close(fd)
    check_free(path, size - getattr(os.stat(path), "st_blocks", 0) * 512)  # a sparse file: all is still to come


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
    are removed first; when `final` is absent because `replace_dir` was killed between its
    two renames, the complete copy it left (the new one, else the old) is moved back first.
    Move the result into place with `replace_dir` inside the block.
    """
    final = Path(final)
    _restore_interrupted(final)
    remove_stale(final)
    remove_stale(final.with_name(final.name + ".old"))  # replace_dir's, if it was killed mid-way
    tmp = _temp_name(final)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        with disk_full_error(final):  # a write that filled the disk: one clear error, and this folder goes
            yield tmp
    except DiskFullError as e:
        if not e.path.is_relative_to(tmp):
            raise
        # named as the finished folder would hold it: the work folder is gone when the message is read
        raise DiskFullError(final / e.path.relative_to(tmp), e.needed, e.free, e.what) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _restore_interrupted(final: Path) -> None:
    """Move back the complete folder a `replace_dir` killed between its renames left, if `final` is absent.

    Both copies then lie beside it, each with its `MARKER`: the new one (``<final>.tmp-...``,
    marked just before the renames; a work folder short of that has none) is preferred, else
    the old one (``<final>.old.tmp-...``). The other is removed as stale afterwards.
    """
    if final.exists() or final.is_symlink():
        return
    for leftovers in (_stale(final), _stale(final.with_name(final.name + ".old"))):
        done = [p for p in leftovers if p.is_dir() and not p.is_symlink() and (p / MARKER).is_file()]
        if done:
            os.replace(max(done, key=lambda p: p.stat().st_mtime), final)
            return


def _all_paths(d: Path) -> list[str]:
    """Every file and folder under `d` (paths relative to it), but its `MARKER`."""
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p != d / MARKER)


def _listed_files(d: Path) -> set[str]:
    """The files under `d` its checksums manifests (``checksums.json``, in `d` or a subfolder) list."""
    listed = set()
    for manifest in d.rglob("checksums.json"):
        try:
            names = read_json(manifest).get("files")
        except ValueError:
            continue
        base = manifest.parent.relative_to(d)
        listed |= {(base / n).as_posix() for n in (names if isinstance(names, dict) else ()) if isinstance(n, str)}
    return listed


#: files ibp-graph writes in every folder of its own beside the data files their manifest lists.
_BOOKKEEPING = frozenset({"meta.json", "checksums.json", MARKER})


def _not_own(directory: PathLike) -> list[str]:
    """The files and folders (relative paths; folders end in /) under `directory` ibp-graph did not write.

    Its marker (`MARKER`) lists every path it holds; one written before the list existed
    names the top-level entries only, and a prepared folder written before markers is
    known by its meta.json's format and its top-level names: below the top, such folders
    hold what their checksums manifests list and their bookkeeping files (`_BOOKKEEPING`).
    A subfolder marked as ibp-graph's own output is judged by its own marker. Leftover
    temporaries of ibp-graph's atomic writes (exactly ``NAME.tmp-<this host>-<pid>``) count as its own.
    """
    d = Path(directory)
    top, paths = set(), None
    try:
        if (d / MARKER).is_file():
            marker = read_json(d / MARKER)
            if marker.get("written_by") == "ibp-graph" and isinstance(marker.get("entries"), list):
                top = {e for e in marker["entries"] if isinstance(e, str)}
                if isinstance(marker.get("files"), list):
                    paths = top | {e for e in marker["files"] if isinstance(e, str)}
        elif read_json(d / "meta.json").get("format") in _UNMARKED_FORMATS:
            top = _UNMARKED_NAMES
    except ValueError:
        pass
    listed = _listed_files(d) if paths is None and top else set()
    found, todo = [], [d]
    while todo:
        folder = todo.pop()
        for p in sorted(folder.iterdir()):
            rel, is_dir = p.relative_to(d).as_posix(), p.is_dir() and not p.is_symlink()
            if rel == MARKER or _is_temp_name(p.name):
                continue
            if folder != d and is_dir and (p / MARKER).is_file() and not _not_own(p):
                continue  # an output of its own (a store added later)
            if paths is not None:
                own = rel in paths
            else:
                own = p.name in top if folder == d else is_dir or rel in listed or p.name in _BOOKKEEPING
            if not own:
                found.append(rel + "/" if is_dir else rel)
            elif is_dir:
                todo.append(p)
    return sorted(found)


def is_own_output(directory: PathLike) -> bool:
    """Whether the folder `directory` is an output ibp-graph moved into place and holds nothing else (`_not_own`)."""
    return not _not_own(directory)


def note_output_entry(directory: PathLike, name: str) -> None:
    """Record `name` (an entry ibp-graph added later, e.g. a feature store) and the paths under it in the marker
    of `directory`, if any."""
    d = Path(directory)
    path = d / MARKER
    if path.is_file():
        marker = read_json(path)
        entries = sorted(set(marker.get("entries") or []) | {name})
        if isinstance(marker.get("files"), list):  # a marker written before the list existed stays without it
            under = [p for p in _all_paths(d) if p == name or p.startswith(name + "/")]
            marker["files"] = sorted(set(marker["files"]) | set(under))
        write_text(path, json.dumps(dict(marker, entries=entries), indent=1) + "\n")


def check_new_entry(directory: PathLike, name: str, what: str) -> None:
    """OutputFolderError before `name` is added to `directory`'s output (`note_output_entry` then records every
    path under it) when ``directory/name`` holds files ibp-graph did not write: recording them would claim them,
    and the next `replace_dir` of `directory` would delete them. Absent, empty or holding only ibp-graph's own
    files (or the temporaries of its work) is accepted."""
    entry = Path(directory) / name
    if not (entry.exists() or entry.is_symlink()):
        return
    if entry.is_symlink() or not entry.is_dir():
        raise OutputFolderError(f"{entry} is a {'link' if entry.is_symlink() else 'file'}, not a folder ibp-graph "
                                f"wrote; {what} would go there, so nothing was changed: move it away, then run again")
    found = [rel for rel in _not_own(directory) if rel.startswith(name + "/")]
    if found == [name + "/"]:  # not recorded as ibp-graph's: whatever it holds is the user's, temporaries aside
        found = sorted(f"{name}/{p.name}" for p in entry.iterdir() if not _is_temp_name(p.name))
    if found:
        raise OutputFolderError(
            f"{entry} holds files ibp-graph did not write ({listing(found)}); {what} would go there and claim them "
            "as ibp-graph's (a later prepare into this folder would delete them), so nothing was changed: move "
            "them away, then run again")


def listing(items: Sequence[str], limit: int = 5) -> str:
    """The first `limit` of `items` for a message, and how many more there are."""
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _check_replaceable(final: Path) -> None:
    """OutputFolderError unless `final` is absent, an empty folder, or ibp-graph's own earlier output."""
    if final.is_symlink():
        raise OutputFolderError(f"output folder {final} is a symbolic link (to {os.readlink(final)}); ibp-graph "
                                "does not replace links: pass the folder it points to, or a new folder")
    if not final.exists():
        return
    if not final.is_dir():
        raise OutputFolderError(f"output folder {final} is a file, not a folder; nothing was written: pass a new "
                                "or empty folder")
    foreign = _not_own(final)
    temps = {rel: _other_host_temp(Path(rel).name) for rel in foreign}
    theirs = {rel: t for rel, t in temps.items() if t is not None}
    if theirs:  # ibp-graph's on another host (shared disk): whether its process still runs cannot be told here
        named = ", ".join(f"{final / rel} (process {pid} on host {host!r})" for rel, (host, pid) in theirs.items())
        others = [rel for rel in foreign if rel not in theirs]
        raise OutputFolderError(
            f"output folder {final} holds {len(theirs)} temporar{'y' if len(theirs) == 1 else 'ies'} that ibp-graph "
            f"processes on other hosts are writing or left behind: {named}; from this host ibp-graph cannot tell "
            "whether such a process still runs, so it deletes none of them and nothing was changed: delete each one "
            "whose host has no ibp-graph process still preparing into this folder (rm -r PATH), then run again"
            + (f"; it also holds files ibp-graph did not write ({listing(others)}): move those away" if others else ""))
    if foreign:
        raise OutputFolderError(
            f"output folder {final} holds files ibp-graph did not write ({listing(foreign)}); it writes only into "
            f"an absent or empty folder or one it prepared before, and nothing was changed: pass a new or empty "
            f"folder, or move those files away")


def check_output(final: PathLike, inputs: Iterable[PathLike] = ()) -> Path:
    """`final`, checked before any work as a place to write a result into, or OutputFolderError saying why not.

    It must be absent, an empty folder, or ibp-graph's own earlier output (which is then
    replaced), and neither be nor lie inside nor contain any of `inputs` (the files and
    folders the job reads).
    """
    final = Path(final)
    where = final.resolve()
    for inp in inputs:
        src = Path(inp).resolve()
        if where == src or where.is_relative_to(src):
            rel = "is" if where == src else "lies inside"
            raise OutputFolderError(f"output folder {final} {rel} the input {inp}, which this reads; nothing was "
                                    "written: choose an output folder outside it")
        if src.is_relative_to(where):
            raise OutputFolderError(f"output folder {final} contains the input {inp}, which this reads, and would "
                                    "replace it; nothing was written: choose an output folder outside it")
    _check_replaceable(final)
    return final


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C (SIGINT) during the block takes effect when it ends: the user's handler (KeyboardInterrupt by
    default) runs then. Only the main thread, where Python runs signal handlers, needs this."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is None:
        yield  # elsewhere no Python handler runs; None: a handler installed outside Python, not restorable
        return
    received: list = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received and callable(previous):
            previous(signal.SIGINT, received[0])


def replace_dir(tmp: Path, final: Path, *, keep: Callable[[Path], bool] = lambda p: False) -> Path:
    """Move a finished work folder into place, replacing an empty folder or ibp-graph's own earlier output.

    When ``keep(final)`` is true (a finished result another process moved into place
    meanwhile: several machines preparing on one shared disk) `final` wins and `tmp` is
    discarded. The folder it replaces is renamed aside first and removed after, so a
    crash in between leaves one of the two complete, never a half-deleted folder; any
    other folder at `final` is an OutputFolderError and stays as it is. The folder moved
    into place gets a `MARKER` listing its entries and every path under it.
    """
    tmp, final = Path(tmp), Path(final)
    if keep(final):
        shutil.rmtree(tmp)
        return final
    _check_replaceable(final)  # never a folder of someone else's files
    entries = sorted(p.name for p in tmp.iterdir() if p.name != MARKER)
    write_text(tmp / MARKER, json.dumps({"written_by": "ibp-graph", "entries": entries, "files": _all_paths(tmp)},
                                        indent=1) + "\n")
    old, moved = None, False
    try:
        with _interrupts_held():  # a Ctrl-C between the renames would leave no folder at `final`
            if final.exists() or final.is_symlink():
                old = _temp_name(final.with_name(final.name + ".old"))
                os.replace(final, old)
            os.replace(tmp, final)
            moved = True
    finally:  # the earlier output goes once the new one is in place, also when a Ctrl-C held above now raises;
        # a Ctrl-C during the removal waits for it too, so that no part of the earlier output is left beside
        if moved and old is not None:
            with _interrupts_held():
                if old.is_dir() and not old.is_symlink():
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    old.unlink(missing_ok=True)
    return final
