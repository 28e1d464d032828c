"""`ibp-graph verify DIR`: check a feature store, a prepared folder or a shards folder against its checksums
and structure.

A prepared folder is checked with the store and the shards folders (shards-<W>/) inside it. Each
folder gives one line: what was checked, or what is damaged (file, chunks), or that it has no
checksums and so is unverified (not ok either); nothing is repaired or deleted. Folders written
before checksums existed can have them recorded (`--write`), trusting their present content.

A host of a sharded run holds a prepared folder without its raw feature tables (x.npy) and store,
and of a shards folder only its own ranks' ``rank-<r>/`` (data/shards.py): such a prepared folder is
checked without its feature tables when it holds a shards folder, and a shards folder checks the
rank folders present (every table's shard, pinned by shards.json) and names the ranks it lacks.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from ..files import read_json
from ..layout.errors import CodecError
from . import checksums
from .hetero import HeteroPreparedDataset
from .link import ARRAYS as LINK_ARRAYS, LinkPreparedDataset
from .prepared import ARRAYS, PreparedDataset
from .shards import SHARDS_MANIFEST, load_shard, read_shards_manifest
from .store import EncodedTable, store_files

__all__ = ["FolderReport", "kind_of", "check_folder", "record_checksums"]

PathLike = Union[str, os.PathLike]


@dataclass(frozen=True)
class FolderReport:
    """The outcome for one folder: ok, or the error that names what is wrong."""

    directory: Path
    kind: str        # "store", "prepared", "link", "hetero" (a heterogeneous prepared folder) or "shards"
    ok: bool
    message: str
    unverified: bool = False  # not ok because the folder has no checksums (nothing found damaged)


def kind_of(directory: PathLike) -> str:
    """"store" (EncodedTable.save layout), "prepared" (a prepared data set), "link" (a link-prediction one),
    "hetero" (a heterogeneous one), "shards" (write_shards' folder), or a ValueError naming what it is not."""
    d = Path(directory)
    if not d.is_dir():
        raise ValueError(f"{d} is {'a file' if d.exists() else 'missing'}; expected a feature store, a prepared "
                         f"folder (one holding meta.json) or a shards folder (one holding {SHARDS_MANIFEST})")
    if (d / SHARDS_MANIFEST).is_file():
        return "shards"
    if (d / "payload.bin").is_file() and (d / "meta.json").is_file():
        return "store"
    if (d / "meta.json").is_file() and (d / "graph").is_dir():
        return "link" if (d / "link").is_dir() else "prepared"
    if (d / "meta.json").is_file() and (d / "edges").is_dir():
        return "hetero"
    raise ValueError(f"{d} is neither a feature store (payload.bin, meta.json), a prepared folder (meta.json, "
                     f"graph/ or edges/) nor a shards folder ({SHARDS_MANIFEST})")


def _files_checked(m: dict, mode: str, folder: Path, host: bool = False) -> str:
    """What a report line says was checked: the files of checksums.json (on a host of a sharded run, the ones
    it has), their chunks; and for a host, which were not there to check."""
    files = {n: v for n, v in m["files"].items() if not host or (folder / n).is_file()}
    chunks = sum(len(v[checksums.ALGORITHM]) for v in files.values())
    skipped = sorted(set(m["files"]) - set(files))
    return f"{len(files)} files, {chunks} chunks of {m['chunk_bytes']} bytes" + (
        "" if mode == "full" else " (sampled)") + (
        f"; without {', '.join(skipped)} and the store (a host of a sharded run: its shards serve the features)"
        if host else "")


def _folders(directory: PathLike) -> list[tuple[Path, str]]:
    """(folder, kind) of `directory` and, for a prepared folder, of its stores: each one present, and each one
    its meta.json records (store_codec) but that is missing, unless the folder holds shards (a host of a sharded
    run has no store: its shards serve the features)."""
    d = Path(directory)
    kind = kind_of(d)
    todo = [(d, kind)]
    shards = [(p.parent, "shards") for p in sorted(d.glob(f"shards-*/{SHARDS_MANIFEST}"))] if kind != "shards" else []
    if kind in ("prepared", "link", "hetero"):
        try:
            meta = read_json(d / "meta.json")
        except ValueError:
            meta = {}  # the folder's own check names it
        types = meta.get("node_types") if kind == "hetero" else {"x": meta}
        recorded = {d / "nodes" / t / "store" if kind == "hetero" else d / "store" / "x"
                    for t, info in (types.items() if isinstance(types, dict) else ())
                    if isinstance(info, dict) and info.get("store_codec") is not None}
        present = set(d.glob("nodes/*/store") if kind == "hetero" else d.glob("store/x"))
        todo += [(p, "store") for p in sorted(present | (set() if shards else recorded))]
    return todo + shards


_KINDS = {"prepared": PreparedDataset, "link": LinkPreparedDataset, "hetero": HeteroPreparedDataset}


def _check_prepared(folder: Path, kind: str, mode: str, sharded: bool) -> bool:
    """Load a prepared folder in `mode`; when its feature tables are missing and it holds shards (`sharded`),
    load it without them. Whether it was checked as a sharded run's host."""
    try:
        _KINDS[kind].load(folder, verify=mode)
        return False
    except FileNotFoundError:
        if not sharded:
            raise
        _KINDS[kind].load(folder, verify=mode, features=False)  # raises if more than the features is missing
        return True


def _check_shards(folder: Path, mode: str) -> str:
    """Every table's shard of the rank folders present checked (load_shard: pinned by shards.json, then its
    checksums in `mode`); what the report line says. A FileNotFoundError when no rank's shards are here."""
    m = read_shards_manifest(folder)
    ws, tables = m["world_size"], sorted(m["tables"])
    here = [r for r in range(ws) if any((folder / m["tables"][t]["ranks"][r]["dir"]).is_dir() for t in tables)]
    if not here:
        raise FileNotFoundError(f"{folder} holds no rank's shards (rank-<r>/ folders): copy each host's own "
                                "ranks' folders there, or cut the shards again (ibp-graph prepare --shards W)")
    for r in here:
        for t in tables:
            load_shard(folder, r, t, world_size=ws, verify=mode)
    absent = [r for r in range(ws) if r not in here]
    shown = f"ranks {here[0]}-{here[-1]}" if here == list(range(here[0], here[-1] + 1)) and len(here) > 1 \
        else f"rank{'s' if len(here) > 1 else ''} {', '.join(map(str, here))}"
    elsewhere = f"; {len(absent)} rank(s) not on this host (a host needs only its own ranks' rank-<r>/)" if absent else ""
    return f"{len(tables)} table(s) x {len(here)} of {ws} ranks' shards ({shown}) checked{elsewhere}"


def check_folder(directory: PathLike, mode: str = "full") -> list[FolderReport]:
    """Check `directory` (and a prepared folder's store) in `mode`; one report per folder."""
    checksums.check_mode(mode)
    out = []
    folders = _folders(directory)
    sharded = any(k == "shards" for _, k in folders[1:])
    for folder, k in folders:
        try:
            if k == "shards":  # the shards pin their files themselves: no checksums.json of the folder
                out.append(FolderReport(folder, k, True, _check_shards(folder, mode)))
                continue
            if k == "store" and not folder.is_dir():
                out.append(FolderReport(folder, k, False, f"{folder} is missing; {Path(directory) / 'meta.json'} "
                                        "records a feature store there (store_codec): prepare again"))
                continue
            host = False
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", checksums.UnverifiedDataWarning)  # said in the report line
                if k == "store":
                    EncodedTable.load(folder, verify=mode)
                else:
                    host = _check_prepared(folder, k, mode, sharded)
            m = checksums.read_manifest(folder)  # the load checked that it is complete
            if m is None:
                out.append(FolderReport(folder, k, False, f"no {checksums.MANIFEST}: structure checked, content "
                                        f"unverified; record checksums with `ibp-graph verify --write {folder}` "
                                        "(trusting the present files) or re-run the step that wrote it",
                                        unverified=True))
            else:
                out.append(FolderReport(folder, k, True, _files_checked(m, mode, folder, host)))
        except (CodecError, FileNotFoundError, ValueError) as e:
            out.append(FolderReport(folder, k, False, str(e)))
    return out


def record_checksums(directory: PathLike) -> list[Path]:
    """Write checksums.json for a folder (and its store) that has none, trusting the present files; return them.

    Refuses a folder that already has checksums: recording over them would bless damage.
    """
    written = []
    for folder, k in _folders(directory):
        # shards.json pins every shard's files; a store meta.json records but that is missing has none to record
        if k == "shards" or (folder / checksums.MANIFEST).exists() or not folder.is_dir():
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
