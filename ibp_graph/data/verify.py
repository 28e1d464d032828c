"""`ibp-graph verify DIR`: check a feature store or a prepared folder against its checksums and structure.

A prepared folder is checked with the store inside it. Each folder gives one line:
what was checked, or what is damaged (file, chunks), or that it has no checksums and
so is unverified (not ok either); nothing is repaired or deleted. Folders written
before checksums existed can have them recorded (`--write`), trusting their present
content.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from ..layout.errors import CodecError
from . import checksums
from .hetero import HeteroPreparedDataset
from .link import ARRAYS as LINK_ARRAYS, LinkPreparedDataset
from .prepared import ARRAYS, PreparedDataset
from .store import EncodedTable, store_files

__all__ = ["FolderReport", "kind_of", "check_folder", "record_checksums"]

PathLike = Union[str, os.PathLike]


@dataclass(frozen=True)
class FolderReport:
    """The outcome for one folder: ok, or the error that names what is wrong."""

    directory: Path
    kind: str        # "store", "prepared", "link" or "hetero" (a heterogeneous prepared folder)
    ok: bool
    message: str
    unverified: bool = False  # not ok because the folder has no checksums (nothing found damaged)


def kind_of(directory: PathLike) -> str:
    """"store" (EncodedTable.save layout), "prepared" (a prepared data set), "link" (a link-prediction one),
    "hetero" (a heterogeneous one), or a ValueError naming what it is not."""
    d = Path(directory)
    if not d.is_dir():
        raise ValueError(f"{d} is {'a file' if d.exists() else 'missing'}; expected a feature store or a prepared "
                         "folder (one holding meta.json)")
    if (d / "payload.bin").is_file() and (d / "meta.json").is_file():
        return "store"
    if (d / "meta.json").is_file() and (d / "graph").is_dir():
        return "link" if (d / "link").is_dir() else "prepared"
    if (d / "meta.json").is_file() and (d / "edges").is_dir():
        return "hetero"
    raise ValueError(f"{d} is neither a feature store (payload.bin, meta.json) nor a prepared folder (meta.json, "
                     "graph/ or edges/)")


def _files_checked(m: dict, mode: str) -> str:
    chunks = sum(len(v[checksums.ALGORITHM]) for v in m["files"].values())
    return f"{len(m['files'])} files, {chunks} chunks of {m['chunk_bytes']} bytes" + (
        "" if mode == "full" else " (sampled)")


def _folders(directory: PathLike) -> list[tuple[Path, str]]:
    """(folder, kind) of `directory` and, for a prepared folder, of its store."""
    d = Path(directory)
    kind = kind_of(d)
    todo = [(d, kind)]
    if kind in ("prepared", "link") and (d / "store" / "x" / "meta.json").is_file():
        todo.append((d / "store" / "x", "store"))
    if kind == "hetero":
        todo += [(p.parent, "store") for p in sorted(d.glob("nodes/*/store/meta.json"))]
    return todo


def check_folder(directory: PathLike, mode: str = "full") -> list[FolderReport]:
    """Check `directory` (and a prepared folder's store) in `mode`; one report per folder."""
    checksums.check_mode(mode)
    out = []
    for folder, k in _folders(directory):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", checksums.UnverifiedDataWarning)  # said in the report line
                if k == "store":
                    EncodedTable.load(folder, verify=mode)
                elif k == "hetero":
                    HeteroPreparedDataset.load(folder, verify=mode)
                elif k == "link":
                    LinkPreparedDataset.load(folder, verify=mode)
                else:
                    PreparedDataset.load(folder, verify=mode)
            m = checksums.read_manifest(folder)  # the load checked that it is complete
            if m is None:
                out.append(FolderReport(folder, k, False, f"no {checksums.MANIFEST}: structure checked, content "
                                        f"unverified; record checksums with `ibp-graph verify --write {folder}` "
                                        "(trusting the present files) or re-run the step that wrote it",
                                        unverified=True))
            else:
                out.append(FolderReport(folder, k, True, _files_checked(m, mode)))
        except (CodecError, FileNotFoundError, ValueError) as e:
            out.append(FolderReport(folder, k, False, str(e)))
    return out


def record_checksums(directory: PathLike) -> list[Path]:
    """Write checksums.json for a folder (and its store) that has none, trusting the present files; return them.

    Refuses a folder that already has checksums: recording over them would bless damage.
    """
    written = []
    for folder, k in _folders(directory):
        if (folder / checksums.MANIFEST).exists():
            continue
        if k == "hetero":
            raise ValueError(f"{folder} is a heterogeneous prepared folder without {checksums.MANIFEST}; every "
                             "one is written with it: prepare it again")
        names = {"prepared": ARRAYS, "link": LINK_ARRAYS}.get(k) or store_files(folder)
        written.append(checksums.write_manifest(folder, names))
    if not written:
        raise ValueError(f"{directory} already has {checksums.MANIFEST}; run `ibp-graph verify {directory}` to "
                         "check it (checksums are never recorded over existing ones)")
    return written
