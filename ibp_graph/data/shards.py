"""Which rank of a process group holds which rows of a feature table: :class:`ShardLayout`.

A table of `num_rows` rows is split over `world_size` ranks. Each rank's shard holds its rows in
ascending global id; a global id maps to (owner rank, row of the owner's shard). Two kinds:

- ``contiguous`` (default): rank r holds rows ``bounds[r]:bounds[r+1]`` (equal ranges, the first
  ``num_rows % world_size`` ranks one more row);
- an assignment (``from_assignment``): any node -> rank map, e.g. from a partitioner (METIS through
  pymetis, DGL's partition book); its shards keep each rank's nodes in ascending id.

``describe()`` is what ranks compare before they exchange rows (the same layout on every rank).

A shard made by `shard_of` or `load_shard` records the rank whose rows it holds (`shard_rank`) and the layout it
was cut by (`shard_layout`: its describe()), so that a ShardedSource refuses a shard served by another rank
(``load_shard(d, LOCAL_RANK)`` on several hosts, or ranks swapped) or with another layout of the same per-rank
counts (contiguous ranges and a METIS assignment, two assignments): an even split gives every shard the same row
count, and nothing else would tell them apart.

On disk (`write_shards`, `load_shard`; ``ibp-graph prepare --shards W``)::

    shards.json              the manifest (written last): world_size, and per feature table its layout
                             (ShardLayout.describe()), codec name and fingerprint, row shape and dtype, the
                             model's input statistics (``stats``: input_stats.feature_stats of the whole table,
                             its sample size and seed, the per-column mean and std as float32 bit patterns in
                             hex) and per rank the shard's folder, rows and the SHA-256 of its meta.json and
                             checksums.json
    rank-<r>/<table>/        rank r's shard of `table` (EncodedTable.save: its own checksums.json)
    layouts/<table>.npy      the node -> rank array of an assignment layout (its SHA-256 in the manifest)

A homogeneous prepared folder has one table, ``x``; a heterogeneous one a table per featured node type.
A host needs shards.json, layouts/ and its ranks' ``rank-<r>/`` folders; of the prepared folder, neither the
raw feature tables (x.npy) nor the store/ they are cut from: the model's input width and statistics are in
shards.json (`table_input`; a manifest written before them has none: None). The manifest pins every shard:
a shard swapped for another rank's, replaced or damaged is refused by name (ShardChecksumError).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from ..files import (OutputFolderError, check_output, listing, note_output_entry, read_json, replace_dir, save_npy,
                     work_dir, write_text)
from ..layout.dtypes import dtype_name
from ..layout.rows import check_row_index
from .checksums import MANIFEST as CHECKSUMS, ChecksumError, check_mode, read_manifest
from .input_stats import SAMPLE_ROWS, SEED, FeatureInput, from_hex, store_stats, to_hex
from .store import EncodedTable

PathLike = Union[str, os.PathLike]
#: the manifest of a shards folder, and its format.
SHARDS_MANIFEST = "shards.json"
SHARDS_FORMAT = "ibp_graph.shards"
SHARDS_VERSION = 1
#: the files of a shard the manifest pins by SHA-256 (checksums.json pins the others, chunk by chunk).
PINNED = ("meta.json", CHECKSUMS)
_TABLE = re.compile(r"^[A-Za-z0-9_]+$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ShardChecksumError(ChecksumError):
    """A rank's shard on disk is not the one its shards.json recorded (swapped, replaced or damaged)."""


class ShardManifestError(ValueError):
    """A shards.json is unreadable, of another format, or inconsistent with itself or with the run."""


def check_rank(rank: Any, world_size: int, argname: str = "rank") -> int:
    """`rank` as an int, or ValueError naming `argname` unless it is an int in [0, world_size)."""
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < world_size:
        raise ValueError(f"{argname}={rank!r} is not accepted; use an int in [0, world_size={world_size})")
    return int(rank)


def shard_rank(table: EncodedTable) -> Optional[int]:
    """The rank whose shard `table` is, as `shard_of` or `load_shard` recorded it (the table's `shard_rank`
    attribute, set by them only); None for a table made otherwise (nothing to check it against)."""
    return getattr(table, "shard_rank", None)


def shard_layout(table: EncodedTable) -> Optional[dict]:
    """The description (ShardLayout.describe()) of the layout `table` was cut by, as `shard_of` or `load_shard`
    recorded it (the table's `shard_layout` attribute, set by them only); None for a table made otherwise."""
    return getattr(table, "shard_layout", None)


def layout_name(description: dict) -> str:
    """A layout's description (ShardLayout.describe()) as a message names it: kind, sizes and digest."""
    return (f"the {description['kind']} layout of {description['num_rows']} rows over {description['world_size']} "
            f"ranks (digest {description['digest'][:16]})")


def check_cut_by(shard: EncodedTable, layout: "ShardLayout", argname: str = "layout") -> None:
    """ValueError naming both layouts unless `shard` was cut by `layout` (or records no layout: `shard_layout`):
    a shard read by another layout of the same per-rank counts would serve other rows as its own."""
    cut = shard_layout(shard)
    if cut is not None and cut["digest"] != layout.digest():
        raise ValueError(f"{argname}={layout!r} is not accepted for this shard: it was cut by {layout_name(cut)}, "
                         f"and {argname} is {layout_name(layout.describe())}, which would read other rows as its "
                         "rows; accepted: the layout it was cut by (load_shard returns it with the shard)")


class ShardLayout:
    """Owner rank and shard row of every global row id of a table of `num_rows` rows."""

    def __init__(self, num_rows: int, world_size: int, *, owner: Optional[np.ndarray] = None):
        if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
            raise ValueError(f"world_size={world_size!r} is not accepted; use an int >= 1")
        if isinstance(num_rows, bool) or not isinstance(num_rows, (int, np.integer)) or num_rows < 0:
            raise ValueError(f"num_rows={num_rows!r} is not accepted; use an int >= 0")
        self.num_rows, self.world_size = int(num_rows), int(world_size)
        self._owner = self._local = None
        if owner is None:
            self.kind = "contiguous"
            per, extra = divmod(self.num_rows, self.world_size)
            sizes = np.full(self.world_size, per, np.int64)
            sizes[:extra] += 1
            self.bounds = np.zeros(self.world_size + 1, np.int64)
            np.cumsum(sizes, out=self.bounds[1:])
            self.counts = sizes
            return
        owner = np.asarray(owner)
        if owner.ndim != 1 or owner.shape[0] != self.num_rows or owner.dtype.kind not in "iu":
            raise ValueError(f"owner has shape {owner.shape} and dtype {owner.dtype}; accepted: a 1-d integer "
                             f"array of num_rows={self.num_rows} ranks")
        if owner.size and (int(owner.min()) < 0 or int(owner.max()) >= self.world_size):
            bad = int(np.flatnonzero((owner < 0) | (owner >= self.world_size))[0])
            raise ValueError(f"owner[{bad}]={int(owner[bad])} is not a rank of world_size={self.world_size}; "
                             f"accepted: ranks in [0, {self.world_size})")
        self.kind = "assignment"
        self._owner = owner.astype(np.int32 if self.world_size < 2**31 else np.int64)
        self.counts = np.bincount(self._owner, minlength=self.world_size).astype(np.int64)
        # a node's shard row: its place among its owner's nodes, in ascending id
        order = np.argsort(self._owner, kind="stable")
        starts = np.zeros(self.world_size + 1, np.int64)
        np.cumsum(self.counts, out=starts[1:])
        local = np.empty(self.num_rows, np.int64)
        local[order] = np.arange(self.num_rows, dtype=np.int64) - np.repeat(starts[:-1], self.counts)
        self._local = local
        self.bounds = None

    @classmethod
    def contiguous(cls, num_rows: int, world_size: int) -> "ShardLayout":
        """Equal contiguous row ranges, in rank order."""
        return cls(num_rows, world_size)

    @classmethod
    def from_assignment(cls, owner: Sequence[int], world_size: Optional[int] = None) -> "ShardLayout":
        """A node -> rank map (`world_size`: default, the largest rank + 1)."""
        owner = np.asarray(owner)
        if owner.ndim != 1:
            raise ValueError(f"owner has shape {owner.shape}; accepted: a 1-d integer array, the rank of each node")
        ws = int(owner.max()) + 1 if world_size is None and owner.size else world_size
        return cls(owner.shape[0], 1 if ws is None else ws, owner=owner)

    def locate(self, ids: np.ndarray, argname: str = "ids") -> tuple[np.ndarray, np.ndarray]:
        """(owner rank, shard row) of global row ids `ids` (IndexError naming `argname` for one out of range)."""
        ids = check_row_index(ids, self.num_rows, argname)
        if self.bounds is not None:
            owner = np.searchsorted(self.bounds, ids, side="right") - 1
            return owner, ids - self.bounds[owner]
        return self._owner[ids].astype(np.int64), self._local[ids]

    def rows_of(self, rank: int) -> np.ndarray:
        """The global ids rank `rank`'s shard holds, in shard-row order (ascending)."""
        rank = check_rank(rank, self.world_size)
        if self.bounds is not None:
            return np.arange(self.bounds[rank], self.bounds[rank + 1], dtype=np.int64)
        return np.flatnonzero(self._owner == rank).astype(np.int64)

    def owner_array(self) -> np.ndarray:
        """The owner of every row (an assignment's own array; made for contiguous ranges)."""
        if self._owner is not None:
            return self._owner
        return np.repeat(np.arange(self.world_size, dtype=np.int32), self.counts)

    def digest(self) -> str:
        """SHA-256 over the layout's kind and contents (equal layouts, equal digests)."""
        h = hashlib.sha256(f"{self.kind}:{self.num_rows}:{self.world_size}:".encode())
        h.update(np.ascontiguousarray(self.bounds if self.bounds is not None else self._owner).tobytes())
        return h.hexdigest()

    def describe(self) -> dict:
        """What ranks compare before exchanging rows, and a manifest records."""
        return {"kind": self.kind, "num_rows": self.num_rows, "world_size": self.world_size,
                "counts": [int(c) for c in self.counts], "digest": self.digest()}

    def __eq__(self, other) -> bool:
        return isinstance(other, ShardLayout) and self.describe() == other.describe()

    def __repr__(self) -> str:
        return f"ShardLayout({self.kind}, num_rows={self.num_rows}, world_size={self.world_size})"



def shard_of(store: EncodedTable, layout: ShardLayout, rank: int) -> EncodedTable:
    """Rank `rank`'s shard of a pre-encoded `store` (an EncodedTable): its rows' compressed bytes as they
    are (one codec for every shard, nothing re-encoded), recording `rank` (`shard_rank`) and `layout`
    (`shard_layout`)."""
    if not isinstance(store, EncodedTable):
        raise TypeError(f"store must be an EncodedTable (ibp_graph.data.store), got {type(store).__name__}")
    if not isinstance(layout, ShardLayout):
        raise TypeError(f"layout must be a ShardLayout, got {type(layout).__name__}")
    if store.n_rows != layout.num_rows:
        raise ValueError(f"the store has {store.n_rows} rows; the layout splits {layout.num_rows}")
    rank = check_rank(rank, layout.world_size)
    shard = EncodedTable(store.codec, store.index_select(torch.from_numpy(layout.rows_of(rank))))
    shard.shard_rank, shard.shard_layout = rank, layout.describe()
    return shard


# ---------------------------------------------------------------------------------------------
# Shards on disk


def shard_dir(table: str, rank: int) -> str:
    """The folder of rank `rank`'s shard of `table`, relative to a shards folder."""
    return f"rank-{rank}/{table}"


def _owner_file(table: str) -> str:
    return f"layouts/{table}.npy"


def default_shards_dir(prepared: PathLike, world_size: int) -> Path:
    """Where `write_shards` (and ``ibp-graph prepare --shards W``) puts the shards of a prepared folder."""
    return Path(prepared) / f"shards-{world_size}"


def _digests(directory: Path) -> dict[str, str]:
    """SHA-256 of each PINNED file of a shard folder (FileNotFoundError naming a missing one)."""
    out = {}
    for name in PINNED:
        path = directory / name
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: {directory} is not a complete shard")
        out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _source_tables(source: Any, verify: str) -> tuple[dict, Optional[Path], dict]:
    """(table name -> EncodedTable, the prepared folder or None, table name -> its raw file in that folder) of
    what `write_shards` was given."""
    if isinstance(source, EncodedTable):
        return {"x": source}, None, {}
    if isinstance(source, Mapping):
        for name, table in source.items():
            if not isinstance(table, EncodedTable):
                raise TypeError(f"source[{name!r}] must be an EncodedTable, got {type(table).__name__}")
        return dict(source), None, {}
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be a prepared folder, an EncodedTable or a mapping of them, got "
                        f"{type(source).__name__}")
    d = Path(source)
    kind = prepared_kind(d)
    if kind is not None:
        ds = kind.load(d, verify=verify)
        if not ds.has_store():
            raise FileNotFoundError(f"{d} has no pre-encoded feature store, which the shards are cut from: "
                                    f"prepare it with a store (without --no-store)")
        hetero = hasattr(ds, "x_dict")
        names = sorted(ds.x_dict) if hetero else ["x"]
        tables = {t: ds.store(t) for t in names}
        return tables, d, {t: ds.feature_file(t).relative_to(d).as_posix() for t in names}
    raise FileNotFoundError(f"{d} is not a finished prepared data set (no valid meta.json): prepare it first "
                            "(ibp-graph prepare --dataset NAME)")


def prepared_kind(directory: PathLike) -> Optional[type]:
    """The class of the finished prepared folder `directory` (node, heterogeneous or link data set), or None."""
    from .hetero import HeteroPreparedDataset
    from .link import LinkPreparedDataset
    from .prepared import PreparedDataset

    return next((k for k in (PreparedDataset, HeteroPreparedDataset, LinkPreparedDataset) if k.is_complete(directory)),
                None)


def write_shards(source: Any, world_size: int, out: Optional[PathLike] = None, *,
                 layouts: Optional[Mapping[str, ShardLayout]] = None, verify: str = "sample",
                 progress: bool = True, keep_complete: bool = False) -> Path:
    """Cut every feature table of `source` into `world_size` shards on disk; return the shards folder.

    `source`: a prepared folder (its pre-encoded stores: ``x``, or one table per featured node type), an
    EncodedTable (table ``x``) or a mapping of table names to EncodedTables. `out`: the shards folder
    (default for a prepared folder: its ``shards-<world_size>/``, recorded as its own); it must be absent,
    empty or earlier shards (a folder with a shards.json this wrote; anything else is an OutputFolderError,
    and nothing is changed), and is written in a work folder and moved into place whole. `layouts`: a
    ShardLayout per table (default: contiguous ranges; a key naming no table is a ValueError); every rank
    needs at least one row of every table.
    Each shard keeps its rows' compressed bytes as they are (one codec for every shard). With
    `keep_complete`, shards another process finished first at `out` are kept (machines sharing a disk).
    """
    from .prepared import progress_bar

    check_mode(verify)
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
        raise ValueError(f"world_size={world_size!r} is not accepted; use an int >= 1 (the ranks of the run)")
    world_size = int(world_size)
    tables, prepared, raw_files = _source_tables(source, verify)
    if not tables:
        raise ValueError("the source has no feature table to shard")
    if out is None:
        if prepared is None:
            raise ValueError("out is required when the source is not a prepared folder")
        out = default_shards_dir(prepared, world_size)
    out = Path(out)
    if layouts is not None and not isinstance(layouts, Mapping):
        raise TypeError(f"layouts must be a mapping of table names to ShardLayouts, got {type(layouts).__name__}")
    unknown = sorted(set(layouts or {}) - set(tables))
    if unknown:
        raise ValueError(f"layouts[{unknown[0]!r}] names no table of the source; its tables are {sorted(tables)}")
    plans = {}
    for name, table in sorted(tables.items()):
        if not _TABLE.fullmatch(name):
            raise ValueError(f"table name {name!r} is not accepted; use letters, digits and '_' (it names a folder)")
        if len(table.shape) != 2:
            raise ValueError(f"table {name!r} has shape {tuple(table.shape)}; shards hold feature tables of shape "
                             "(rows, dim), whose input statistics the manifest records")
        layout = (layouts or {}).get(name) or ShardLayout.contiguous(table.n_rows, world_size)
        if not isinstance(layout, ShardLayout):
            raise TypeError(f"layouts[{name!r}] must be a ShardLayout, got {type(layout).__name__}")
        if layout.num_rows != table.n_rows or layout.world_size != world_size:
            raise ValueError(f"layouts[{name!r}] splits {layout.num_rows} rows over {layout.world_size} ranks; "
                             f"table {name!r} has {table.n_rows} rows and world_size={world_size}")
        empty = np.flatnonzero(layout.counts == 0)
        if table.n_rows == 0:
            raise ValueError(f"table {name!r} has no rows: there is nothing to shard; accepted: tables of at least "
                             f"world_size={world_size} rows")
        if empty.size:
            raise ValueError(f"world_size={world_size} is not accepted for table {name!r} of {table.n_rows} rows: "
                             f"rank {int(empty[0])} would hold no row; every rank needs at least one row "
                             f"(use at most {table.n_rows} ranks{'' if layout.kind == 'contiguous' else ', or an assignment giving every rank a node'})")
        plans[name] = (table, layout)
    # the stores it reads: store/ (homogeneous), nodes/ (heterogeneous), or the folders of tables loaded from
    # disk; the rest of a prepared folder may hold `out`
    inputs = [prepared / "store", prepared / "nodes"] if prepared is not None else \
        [t.guard.path.parent for t in tables.values() if t.guard is not None]
    check_output(out, inputs)
    _check_shards_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    total = sum(t.n_rows for t, _ in plans.values())
    bar = progress_bar(total, f"shards: {world_size} ranks", progress)
    with work_dir(out) as tmp:
        manifest_tables = {}
        for name, (table, layout) in plans.items():
            entry = {"layout": layout.describe(), "codec": table.codec.name, "fingerprint": table.codec.fingerprint,
                     "row_shape": list(table.shape[1:]), "dtype": dtype_name(table.dtype),
                     "stats": _stats_entry(table), "owner": None, "ranks": [],
                     "source": None if prepared is None else source_digest(prepared, raw_files[name])}
            if layout.kind != "contiguous":
                (tmp / "layouts").mkdir(exist_ok=True)
                save_npy(tmp / _owner_file(name), layout.owner_array())
                entry["owner"] = {"file": _owner_file(name), "sha256": _file_sha256(tmp / _owner_file(name))}
            for r in range(world_size):
                d = tmp / shard_dir(name, r)
                shard_of(table, layout, r).save(d)
                entry["ranks"].append({"dir": shard_dir(name, r), "rows": int(layout.counts[r]),
                                       "sha256": _digests(d)})
                bar.update(int(layout.counts[r]))
            manifest_tables[name] = entry
        manifest = {"format": SHARDS_FORMAT, "version": SHARDS_VERSION, "world_size": world_size,
                    "tables": manifest_tables}
        write_text(tmp / SHARDS_MANIFEST, json.dumps(manifest, indent=1) + "\n")
        if not (keep_complete and (out / SHARDS_MANIFEST).is_file()):
            _check_shards_out(out)  # what another process may have put there meanwhile
        replace_dir(tmp, out, keep=lambda p: keep_complete and (p / SHARDS_MANIFEST).is_file())
    bar.close()
    if prepared is not None and out.parent.resolve() == prepared.resolve():
        note_output_entry(prepared, out.name)  # the folder's own: replaced with it when it is prepared again
    if progress:
        sizes = ", ".join(f"{n} {t.codec.name} {t.n_rows:,} rows" for n, (t, _) in plans.items())
        print(f"wrote {out}: {world_size} shard(s) of each table ({sizes}); a rank needs {SHARDS_MANIFEST}"
              + (", layouts/" if any(e["owner"] for e in manifest_tables.values()) else "")
              + " and its rank-<r>/ folder; of the prepared folder, neither x.npy nor store/", flush=True)
    return out


def _check_shards_out(out: Path) -> None:
    """OutputFolderError unless `out` is absent, empty or an earlier shards folder (its shards.json): a folder
    check_output accepts may be another ibp-graph output, e.g. a prepared data set, which write_shards would
    replace."""
    if out.is_dir() and not out.is_symlink() and any(out.iterdir()) and not (out / SHARDS_MANIFEST).is_file():
        held = listing(sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir()))
        raise OutputFolderError(f"out={str(out)!r} holds {held} and no {SHARDS_MANIFEST}: it is not a shards "
                                "folder, which write_shards would replace; it writes only into an absent or empty "
                                "folder or earlier shards, and nothing was changed: pass a new or empty folder")


def _stats_entry(table: EncodedTable) -> dict:
    """The manifest's record of a table's input statistics: input_stats.feature_stats of the whole table (from
    its store's sample rows, decoded: bit for bit those of the raw table), float32 bit patterns in hex."""
    mean, std = store_stats(table, SAMPLE_ROWS, SEED)
    return {"sample_rows": SAMPLE_ROWS, "seed": SEED, "mean": to_hex(mean), "std": to_hex(std)}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def read_shards_manifest(directory: PathLike) -> dict:
    """The shards.json of `directory`, its structure checked (nothing read from disk is trusted):
    ShardManifestError naming the file, the field and its value for anything not as `write_shards` writes it."""
    path = Path(directory) / SHARDS_MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: {Path(directory)} is not a shards folder (write one with "
                                "`ibp-graph prepare --dataset NAME --shards W`), or its writing was interrupted")
    fix = "; write the shards again (ibp-graph prepare --shards W)"
    m = read_json(path, ShardManifestError, fix)

    def bad(field: str, value: Any, expected: str) -> ShardManifestError:
        return ShardManifestError(f"{path}: {field}={value!r} is not accepted; expected {expected}{fix}")

    if m.get("format") != SHARDS_FORMAT or m.get("version") != SHARDS_VERSION:
        raise ShardManifestError(f"{path} has format {m.get('format')!r} version {m.get('version')!r}; this "
                                 f"ibp-graph reads {SHARDS_FORMAT!r} version {SHARDS_VERSION}{fix}")
    ws = m.get("world_size")
    if not _is_int(ws) or ws < 1:
        raise bad("world_size", ws, "an int >= 1")
    tables = m.get("tables")
    if not isinstance(tables, dict) or not tables:
        raise bad("tables", tables, "a mapping of table names to their shards")
    for name, t in tables.items():
        where = f"tables.{name}"
        if not _TABLE.fullmatch(name):
            raise bad("tables", name, "table names of letters, digits and '_'")
        if not isinstance(t, dict):
            raise bad(where, t, "a mapping")
        lay = t.get("layout")
        if not isinstance(lay, dict) or lay.get("kind") not in ("contiguous", "assignment"):
            raise bad(f"{where}.layout", lay, "a ShardLayout description of kind 'contiguous' or 'assignment'")
        if not _is_int(lay.get("num_rows")) or lay["num_rows"] < 1:
            raise bad(f"{where}.layout.num_rows", lay.get("num_rows"), "an int >= 1")
        if lay.get("world_size") != ws:
            raise bad(f"{where}.layout.world_size", lay.get("world_size"), f"world_size={ws}")
        counts = lay.get("counts")
        if not isinstance(counts, list) or len(counts) != ws or not all(_is_int(c) and c >= 1 for c in counts) \
                or sum(counts) != lay["num_rows"]:
            raise bad(f"{where}.layout.counts", counts, f"{ws} ints >= 1 summing to num_rows={lay['num_rows']}")
        if not isinstance(lay.get("digest"), str) or not _SHA256.fullmatch(lay["digest"]):
            raise bad(f"{where}.layout.digest", lay.get("digest"), "a SHA-256 hex digest")
        owner = t.get("owner")
        if lay["kind"] == "assignment":
            if not isinstance(owner, dict) or owner.get("file") != _owner_file(name) \
                    or not isinstance(owner.get("sha256"), str) or not _SHA256.fullmatch(owner["sha256"]):
                raise bad(f"{where}.owner", owner, f"{{'file': {_owner_file(name)!r}, 'sha256': <hex digest>}}")
        elif owner is not None:
            raise bad(f"{where}.owner", owner, "null (a contiguous layout has no owner array)")
        if not isinstance(t.get("codec"), str) or not _is_int(t.get("fingerprint")):
            raise bad(f"{where}.codec/fingerprint", (t.get("codec"), t.get("fingerprint")), "a codec name and an int")
        if not isinstance(t.get("row_shape"), list) or not all(_is_int(v) and v >= 0 for v in t["row_shape"]) \
                or not isinstance(t.get("dtype"), str):
            raise bad(f"{where}.row_shape/dtype", (t.get("row_shape"), t.get("dtype")), "a list of ints >= 0 and a dtype name")
        if "stats" in t:  # absent: a manifest written before the statistics were recorded
            _check_stats(t["stats"], t["row_shape"], f"{where}.stats", bad)
        source = t.get("source")  # absent: a manifest written before it was recorded
        if source is not None and (not isinstance(source, str) or not _SHA256.fullmatch(source)):
            raise bad(f"{where}.source", source, "null or a SHA-256 hex digest (source_digest)")
        ranks = t.get("ranks")
        if not isinstance(ranks, list) or len(ranks) != ws:
            raise bad(f"{where}.ranks", ranks if not isinstance(ranks, list) else f"<{len(ranks)} entries>",
                      f"one entry per rank ({ws})")
        for r, e in enumerate(ranks):
            if not isinstance(e, dict) or e.get("dir") != shard_dir(name, r):
                raise bad(f"{where}.ranks[{r}].dir", e.get("dir") if isinstance(e, dict) else e, repr(shard_dir(name, r)))
            if e.get("rows") != counts[r]:
                raise bad(f"{where}.ranks[{r}].rows", e.get("rows"), f"layout.counts[{r}]={counts[r]}")
            sha = e.get("sha256")
            if not isinstance(sha, dict) or set(sha) != set(PINNED) or not all(
                    isinstance(v, str) and _SHA256.fullmatch(v) for v in sha.values()):
                raise bad(f"{where}.ranks[{r}].sha256", sha, f"a SHA-256 hex digest of each of {list(PINNED)}")
    return m


def _check_stats(stats: Any, row_shape: list, where: str, bad) -> None:
    """`bad(field, value, expected)` for a stats entry not as `_stats_entry` writes it for rows of `row_shape`."""
    if not isinstance(stats, dict) or set(stats) != {"sample_rows", "seed", "mean", "std"}:
        raise bad(where, stats, "a mapping of sample_rows, seed, mean and std")
    if len(row_shape) != 1:
        raise bad(where, "<statistics>", f"none for rows of shape {row_shape} (statistics are of rows of one "
                  "dimension)")
    if not _is_int(stats["sample_rows"]) or stats["sample_rows"] < 1:
        raise bad(f"{where}.sample_rows", stats["sample_rows"], "an int >= 1")
    if not _is_int(stats["seed"]) or stats["seed"] < 0:
        raise bad(f"{where}.seed", stats["seed"], "an int >= 0")
    for key in ("mean", "std"):
        v = stats[key]
        shown = v if not isinstance(v, list) else f"<{len(v)} entries>"
        if not isinstance(v, list) or len(v) != row_shape[0]:
            raise bad(f"{where}.{key}", shown, f"a list of {row_shape[0]} float32 bit patterns in hex (one per column)")
        try:
            from_hex(v)
        except ValueError as e:
            raise bad(f"{where}.{key}", shown, f"a list of float32 bit patterns in hex ({e})") from None


def source_digest(prepared: PathLike, file: str) -> Optional[str]:
    """Which raw table a shards folder was cut from: the SHA-256 of the checksums.json entry (size and chunk
    digests) of `file` (a path in the prepared folder `prepared`), comparable on a host that holds the folder's
    checksums.json but not the file; None where the folder lists no such file."""
    m = read_manifest(prepared)
    entry = None if m is None else m["files"].get(file)
    return None if entry is None else hashlib.sha256(json.dumps(entry, sort_keys=True).encode()).hexdigest()


def check_source(directory: PathLike, table: str, prepared: PathLike, file: str) -> None:
    """ShardManifestError unless shards folder `directory`'s `table` was cut from `file` of the prepared folder
    `prepared` as its checksums.json records it now (a manifest or folder that records none is not compared):
    shards of another data set of the same shape would otherwise be served as this one's."""
    tables = read_shards_manifest(directory)["tables"]
    if table not in tables:
        raise ValueError(f"table={table!r} is not accepted; {Path(directory)} holds the tables {sorted(tables)}")
    recorded, here = tables[table].get("source"), source_digest(prepared, file)
    if recorded is not None and here is not None and recorded != here:
        raise ShardManifestError(f"{Path(directory) / SHARDS_MANIFEST}: table {table!r} was cut from another "
                                 f"{file} than the one {Path(prepared)} holds (its checksums.json entry differs): "
                                 "shards of another data set; cut them again from this folder")


def table_input(directory: PathLike, table: str) -> Optional[FeatureInput]:
    """The model's input of `table` as the shards folder `directory` records it (row width, and the mean and std
    of input_stats.feature_stats over the whole table, bit for bit), its manifest checked; None for a manifest
    written before the statistics were recorded."""
    tables = read_shards_manifest(directory)["tables"]
    if table not in tables:
        raise ValueError(f"table={table!r} is not accepted; {Path(directory)} holds the tables {sorted(tables)}")
    entry = tables[table]
    if "stats" not in entry:
        return None
    stats = entry["stats"]
    return FeatureInput(entry["row_shape"][0], from_hex(stats["mean"]), from_hex(stats["std"]))


def _layout(directory: Path, name: str, entry: dict) -> ShardLayout:
    """The ShardLayout a manifest entry describes (an assignment's owner array read and checked), or
    ShardManifestError / ShardChecksumError when it differs from the description."""
    lay = entry["layout"]
    if lay["kind"] == "contiguous":
        layout = ShardLayout.contiguous(lay["num_rows"], lay["world_size"])
    else:
        path = directory / entry["owner"]["file"]
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: the assignment layout of table {name!r} (copy layouts/ "
                                    "with shards.json to every host)")
        if _file_sha256(path) != entry["owner"]["sha256"]:
            raise ShardChecksumError(f"{path}: its SHA-256 differs from the one {SHARDS_MANIFEST} recorded for "
                                     f"table {name!r}: the file is damaged or replaced; write the shards again")
        try:
            owner = np.load(path, allow_pickle=False)
            layout = ShardLayout.from_assignment(owner, lay["world_size"])
        except (OSError, ValueError, EOFError) as e:
            raise ShardManifestError(f"{path} is not an owner array of table {name!r} ({e})") from None
    if layout.describe() != lay:
        raise ShardManifestError(f"{directory / SHARDS_MANIFEST}: tables.{name}.layout={lay!r} does not describe "
                                 f"the layout it names ({layout.describe()!r}); write the shards again")
    return layout


def load_shard(directory: PathLike, rank: int, table: Optional[str] = None, *,
               world_size: Optional[int] = None, verify: str = "sample"):
    """Rank `rank`'s shard of `table` in a shards folder, as ``(EncodedTable, ShardLayout)``.

    `table`: default, the folder's only table (a heterogeneous one names a node type). `world_size`: the
    run's rank count, refused when the shards were written for another. The shard's meta.json and
    checksums.json must be the ones shards.json recorded for this rank and table (ShardChecksumError
    naming them otherwise: a shard swapped, replaced or damaged), and its files their checksums (`verify`,
    as EncodedTable.load). The shard records `rank` (`shard_rank`) and the layout (`shard_layout`): a ShardedSource
    of another rank or layout refuses it.
    """
    check_mode(verify)
    d = Path(directory)
    m = read_shards_manifest(d)
    ws, tables = m["world_size"], m["tables"]
    if world_size is not None and world_size != ws:
        raise ShardManifestError(f"{d} holds shards for world_size={ws} ranks; this run has {world_size}: "
                                 f"write shards for it with `ibp-graph prepare --shards {world_size}`")
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < ws:
        raise ValueError(f"rank={rank!r} is not accepted; use an int in [0, {ws}) ({d} holds {ws} ranks' shards)")
    if table is None:
        if len(tables) != 1:
            raise ValueError(f"table=None is not accepted: {d} holds the tables {sorted(tables)}; name one")
        table = next(iter(tables))
    if table not in tables:
        raise ValueError(f"table={table!r} is not accepted; {d} holds the tables {sorted(tables)}")
    entry = tables[table]
    layout = _layout(d, table, entry)
    rank = int(rank)
    sd = d / entry["ranks"][rank]["dir"]
    if not sd.is_dir():
        raise FileNotFoundError(f"{sd} is missing: rank {rank}'s shard of table {table!r} (copy rank-{rank}/ of "
                                f"the shards folder to the host that runs rank {rank})")
    found = _digests(sd)
    wrong = [n for n in PINNED if found[n] != entry["ranks"][rank]["sha256"][n]]
    if wrong:
        raise ShardChecksumError(f"{sd}: rank {rank}'s shard of table {table!r} is not the one {SHARDS_MANIFEST} "
                                 f"recorded ({' and '.join(wrong)} differ{'s' if len(wrong) == 1 else ''}): a shard of another rank or data set, "
                                 "replaced or damaged; copy it again or write the shards again")
    try:
        shard = EncodedTable.load(sd, mmap=True, verify=verify)
    except ChecksumError as e:
        if isinstance(e, ShardChecksumError):
            raise
        raise ShardChecksumError(f"rank {rank}'s shard of table {table!r}: {e}") from None
    want = (entry["codec"], entry["fingerprint"], [layout.counts[rank], *entry["row_shape"]], entry["dtype"])
    got = (shard.codec.name, shard.codec.fingerprint, list(shard.shape), dtype_name(shard.dtype))
    if got != want:
        raise ShardManifestError(f"{sd}: rank {rank}'s shard of table {table!r} holds codec, fingerprint, shape, "
                                 f"dtype {got}; {SHARDS_MANIFEST} records {want}")
    shard.shard_rank, shard.shard_layout = rank, layout.describe()
    return shard, layout


def shard_tables(directory: PathLike) -> list[str]:
    """The tables a shards folder holds (its manifest checked)."""
    return sorted(read_shards_manifest(directory)["tables"])


__all__ = ["ShardLayout", "shard_of", "shard_rank", "shard_layout", "check_cut_by", "layout_name", "check_rank",
           "write_shards", "load_shard", "read_shards_manifest", "shard_tables", "table_input", "prepared_kind", "shard_dir", "default_shards_dir", "ShardChecksumError", "ShardManifestError", "SHARDS_MANIFEST"]
