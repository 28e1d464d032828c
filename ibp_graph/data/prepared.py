"""A prepared data set on disk: memory-mapped graph, features, labels, splits and feature store.

Written once by `ibp-graph prepare` (OGB's raw files, `ibp_graph.data.ogb`) or by the
default data set generator (`ibp_graph.data.graphgen`); opened by training without
copying, so processes on one machine (DataLoader workers, DDP ranks) share the pages.

Folder layout::

    meta.json            format, version, name, sizes, num_classes, how it was made
    graph/               CSCGraph.save: indptr.npy, indices.npy, e_id.npy, meta.json
    x.npy                (num_nodes, dim) node features
    y.npy                (num_nodes,) int64 class of each node, -1 = unlabeled
    split/train.npy      int64 node ids (also valid.npy, test.npy); labeled nodes only
    store/x/             the features pre-encoded (EncodedTable.save layout), optional; its
                         codec ("auto" by default: fit_codec's choice) is named in meta.json
                         (store_codec) and its state is in store/x/codec.bin

    checksums.json       per-chunk checksums of the arrays (ibp_graph.data.checksums); the
                         store has its own in store/x/

`meta.json` is written last: a folder without it is an interrupted preparation.
"""
from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Optional, Union

import numba
import numpy as np
import torch

from ..codec.auto import CodecSpec
from ..sampling.graph import CSCGraph, edge_id_dtype, index_dtype
from . import checksums
from .checksums import UnverifiedDataWarning, check_mode
from ..files import (check_new_entry, disk_full_error, note_output_entry, open_npy, read_json, replace_dir, save_npy,
                     work_dir, write_text)
from ..jit_cache import install as _install_kernel_cache

_install_kernel_cache()  # numba caches this module's kernels per environment (ibp_graph.jit_cache)

__all__ = ["PreparedDataset", "PreparedFolder", "HomogeneousFolder", "LabeledDataset", "SPLITS", "build_csc", "build_relation_arrays", "write_prepared_meta",
           "EdgeIdError", "encode_store", "add_store", "as_tensor", "progress_bar", "FORMAT", "FORMAT_VERSION"]

PathLike = Union[str, os.PathLike]
FORMAT = "ibp_graph.prepared"
FORMAT_VERSION = 1
SPLITS = ("train", "valid", "test")
#: edges per step of the out-of-core CSC build.
EDGE_CHUNK = 1 << 24

EdgeChunks = Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]


def as_tensor(arr: np.ndarray) -> torch.Tensor:
    """A tensor over a (possibly read-only, memory-mapped) array, without copying it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*non-writable.*")
        return torch.from_numpy(arr)


def progress_bar(total: int, desc: str, enabled: bool, unit: str = "rows"):
    """A tqdm bar, or a silent stand-in when progress is off."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, disable=not enabled,
                dynamic_ncols=True, leave=False)


@dataclass(frozen=True, eq=False)
class PreparedFolder:
    """What every prepared folder answers from its meta.json (``meta``), and how it opens its feature stores
    (`verify`); `format` and `format_version` name the meta.json it reads."""

    directory: Path
    meta: dict
    verify: str = field(default="sample", kw_only=True)
    _stores: dict = field(default_factory=dict, repr=False, kw_only=True)  # the stores opened so far
    format: ClassVar[str] = ""
    format_version: ClassVar[int] = 0
    #: whether `ibp-graph verify --write` records checksums for a folder of this kind that has none
    records_checksums: ClassVar[bool] = True

    @property
    def name(self) -> str:
        """The data set's name (e.g. "ogbn-papers100M", "synthetic", "ogbn-mag", "ogbl-citation2")."""
        return self.meta["name"]

    @classmethod
    def is_complete(cls, directory: PathLike) -> bool:
        """Whether `directory` holds a finished preparation of this kind (its meta.json is written last)."""
        path = Path(directory) / "meta.json"
        if not path.is_file():
            return False
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError):
            return False
        return isinstance(meta, dict) and meta.get("format") == cls.format and meta.get("version") == cls.format_version

    def _features_missing(self) -> ValueError:
        """The error for code that reads a feature table of a folder opened without them (load(features=False))."""
        return ValueError(f"{self.directory} was opened without its feature tables (load(features=False): the host "
                          "of a sharded run reads its rows from its shards, and needs no x.npy); open it with "
                          "features=True to read them")

    def _feature_shape(self, info: dict, table: str, rows: int, where: str) -> tuple[int, int]:
        """meta.json's (rows, dim) of feature table `table` (`info`: the mapping that records its x_shape), a
        ValueError naming `where` when it is not [rows, dim]."""
        shape = info.get("x_shape")
        if not (isinstance(shape, list) and len(shape) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                     and v >= 0 for v in shape) and shape[0] == rows):
            raise ValueError(f"{self.directory / 'meta.json'}: {where}x_shape={shape!r} is not accepted for table "
                             f"{table!r}; expected [{rows}, dim]: prepare again")
        return tuple(shape)

    @classmethod
    def _read_meta(cls, directory: PathLike, verify: str, dataset: str) -> tuple[Path, Path, dict]:
        """(folder, its meta.json's path, meta.json) of a folder of this kind, `verify` checked first; an error
        names what is wrong: missing (FileNotFoundError: an interrupted or no preparation, and
        `ibp-graph prepare --dataset <dataset>` to make one), unreadable, or of another format or version
        than this kind's (ValueError)."""
        check_mode(verify)
        meta_path = Path(directory) / "meta.json"
        if not meta_path.is_file():
            raise FileNotFoundError(f"{meta_path.parent} is not a prepared data set (no meta.json); make one with "
                                    f"`ibp-graph prepare --dataset {dataset} --root DIR`, or it was interrupted: "
                                    "prepare again")
        meta = _read_json(meta_path)
        if meta.get("format") != cls.format or meta.get("version") != cls.format_version:
            raise ValueError(f"{meta_path} has format {meta.get('format')!r} version {meta.get('version')!r}; "
                             f"this ibp-graph reads {cls.format!r} version {cls.format_version}: prepare again")
        return meta_path.parent, meta_path, meta

    @classmethod
    def _check_arrays(cls, d: Path, verify: str, arrays: Sequence[str], *, whole: Sequence[str],
                      also: Sequence[str] = (), skip: Sequence[str] = ()) -> None:
        """A FileNotFoundError naming the files of `arrays` and `also` that folder `d` lacks; then the `arrays`'
        checksums checked as `verify` says (`whole`: the small ones, read whole), an UnverifiedDataWarning when
        the folder has no checksums.json. `skip`: arrays neither needed nor read (the feature tables of a folder
        opened without them), so neither looked for nor checked."""
        needed = [p for p in arrays if p not in skip]
        missing = [p for p in (*needed, *also) if not (d / p).is_file()]
        if missing:
            raise FileNotFoundError(f"{d} lacks {', '.join(missing)}: prepare again")
        names = needed if skip else None  # None: every file of checksums.json
        if verify != "none" and checksums.verify(d, verify, names=names, whole=whole, required=arrays) is None:
            fix = f"record them with `ibp-graph verify --write {d}` or prepare again" if cls.records_checksums \
                else "prepare again"
            warnings.warn(f"{d} has no {checksums.MANIFEST}: its arrays are not verified; {fix}",
                          UnverifiedDataWarning, stacklevel=3)


@dataclass(frozen=True, eq=False)
class LabeledDataset(PreparedFolder):
    """What every node-classification data set answers from its labels and splits (``y``, ``split``)."""

    y: torch.Tensor = field(kw_only=True)
    split: dict[str, torch.Tensor] = field(default_factory=dict, kw_only=True)

    @property
    def num_classes(self) -> int:
        """Classes of the node classification task."""
        return int(self.meta["num_classes"])

    def majority_accuracy(self, split: str = "test") -> float:
        """Accuracy of always answering the most frequent training class, on `split`."""
        y_train = self.y[self.split["train"]]
        if y_train.numel() == 0:
            return 0.0
        majority = int(torch.bincount(y_train).argmax())
        target = self.y[self.split[split]]
        return float((target == majority).float().mean()) if target.numel() else 0.0


class HomogeneousFolder:
    """What a prepared folder of one graph and one feature table answers: its sizes, the table (``x``, table
    "x") and its pre-encoded store (store/x); from the fields of the dataclass it is mixed into (``directory``,
    ``meta``, ``graph``, ``_x``, ``verify``, ``_stores``)."""

    @property
    def x(self) -> torch.Tensor:
        """The node features (num_nodes, dim), memory-mapped; a ValueError when the folder was opened without them."""
        if self._x is None:
            raise self._features_missing()
        return self._x

    @property
    def has_features(self) -> bool:
        """Whether the feature table was opened (load's `features`)."""
        return self._x is not None

    @property
    def feature_shapes(self) -> dict[str, tuple[int, int]]:
        """{table: (rows, dim)} of the folder's feature tables as meta.json records them: its one table, "x"."""
        return {"x": self._feature_shape(self.meta, "x", self.graph.num_nodes, "")}

    def feature_file(self, table: str = "x") -> Path:
        """The file of feature table `table` (only "x")."""
        _check_table(table, ["x"])
        return self.directory / "x.npy"

    def feature(self, table: str = "x") -> torch.Tensor:
        """Feature table `table` (only "x": ``x``)."""
        _check_table(table, ["x"])
        return self.x

    @property
    def num_nodes(self) -> int:
        """Nodes of the graph (rows of x)."""
        return self.graph.num_nodes

    @property
    def num_edges(self) -> int:
        """Edges of the graph."""
        return self.graph.num_edges

    @property
    def store_dir(self) -> Path:
        """Where the pre-encoded features live (may not exist)."""
        return self.directory / "store" / "x"

    def has_store(self) -> bool:
        """Whether the folder holds a pre-encoded feature store."""
        return (self.store_dir / "meta.json").is_file()

    def store(self, table: str = "x"):
        """The pre-encoded features of `table` (only "x": EncodedTable, memory-mapped), with the codec they were
        encoded with.

        Opened (and verified as `verify` says) once; later calls return the same table.
        """
        from .store import EncodedTable

        _check_table(table, ["x"])
        if "x" not in self._stores:
            self._stores["x"] = EncodedTable.load(self.store_dir, mmap=True, verify=self.verify)
        return self._stores["x"]

    def _repr_with(self, task: str) -> str:
        """The repr of a folder of this kind: name, sizes, features, `task` (what its task adds), store."""
        x = f"{tuple(self.x.shape)} {self.x.dtype}" if self.has_features else "not opened"
        return (f"{type(self).__name__}({self.name!r}, nodes={self.num_nodes:,}, edges={self.num_edges:,}, "
                f"x={x}, {task}, store={'yes' if self.has_store() else 'no'})")

    @property
    def store_codec(self) -> Optional[str]:
        """Name of the codec the feature store was encoded with (None without a store)."""
        if not self.has_store():
            return None
        return read_store_codec(self.store_dir / "meta.json")


@dataclass(frozen=True, eq=False)
class PreparedDataset(LabeledDataset, HomogeneousFolder):
    """A prepared folder, opened memory-mapped: graph, features, labels and splits."""

    graph: CSCGraph
    _x: Optional[torch.Tensor]  # None: opened without features (the property x says so)
    format = FORMAT
    format_version = FORMAT_VERSION

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={v.numel():,}" for k, v in self.split.items())
        return self._repr_with(f"classes={self.num_classes}, {sizes}")

    @classmethod
    def load(cls, directory: PathLike, *, mmap: bool = True, verify: str = "sample",
             features: bool = True) -> "PreparedDataset":
        """Open a prepared folder, checking its structure and (`verify`: "sample", "full", "none") its checksums.

        Arrays are copy-on-write memory maps unless mmap=False (a write changes this
        process's copy, never the files). A damaged file raises an error naming it; a
        folder prepared before checksums existed opens with an UnverifiedDataWarning.
        With ``features=False`` x.npy is neither opened nor checked (nor needed: a host of a
        sharded run), and ``x`` raises a ValueError saying so; meta.json's x_shape gives
        `feature_shapes`.
        """
        d, meta_path, meta = cls._read_meta(directory, verify, "NAME")
        num_classes = meta.get("num_classes")
        if not isinstance(meta.get("name"), str):
            raise ValueError(f"{meta_path}: name={meta.get('name')!r} is not accepted; expected str")
        if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 1:
            raise ValueError(f"{meta_path}: num_classes={num_classes!r} is not accepted; expected an int >= 1: "
                             "prepare again")
        cls._check_arrays(d, verify, ARRAYS, whole=tuple(f"split/{s}.npy" for s in SPLITS), also=("graph/meta.json",),
                          skip=() if features else ("x.npy",))
        mode = "c" if mmap else None
        graph = CSCGraph.load(d / "graph", mmap=mmap)
        x = _load_npy(d / "x.npy", mode) if features else None
        if x is not None and str(x.dtype) != meta.get("x_dtype"):
            raise ValueError(f"{d}/x.npy holds {x.dtype}; meta.json records x_dtype={meta.get('x_dtype')!r}: "
                             "prepare again")
        x = None if x is None else as_tensor(x)
        y = _load_npy(d / "y.npy", mode)
        if y.dtype != np.int64 or (y.ndim == 1 and y.size and (int(y.min()) < -1 or int(y.max()) >= num_classes)):
            shown = f"{y.dtype} values in [{int(y.min())}, {int(y.max())}]" if y.size and y.dtype.kind in "iu" \
                else str(y.dtype)
            raise ValueError(f"{d}/y.npy must hold int64 classes in [-1, {num_classes}) (-1: unlabeled; meta.json "
                             f"records num_classes={num_classes}); it holds {shown}: prepare again")
        y = as_tensor(y)
        split = {s: torch.from_numpy(_load_npy(d / "split" / f"{s}.npy", None)) for s in SPLITS}
        if (x is not None and (x.dim() != 2 or x.shape[0] != graph.num_nodes)) or y.shape != (graph.num_nodes,):
            shown = "(not opened)" if x is None else tuple(x.shape)
            raise ValueError(f"{d}: x has shape {shown} and y shape {tuple(y.shape)}; the graph has "
                             f"{graph.num_nodes} nodes (expected ({graph.num_nodes}, dim) and ({graph.num_nodes},)): "
                             "prepare again")
        for s, idx in split.items():
            if idx.dim() != 1 or idx.dtype != torch.int64 or (idx.numel() and (
                    int(idx.min()) < 0 or int(idx.max()) >= graph.num_nodes)):
                raise ValueError(f"{d}/split/{s}.npy must hold int64 node ids in [0, {graph.num_nodes}); "
                                 f"it holds {idx.dtype} {tuple(idx.shape)}: prepare again")
        ds = cls(directory=d, meta=meta, graph=graph, _x=x, y=y, split=split, verify=verify)
        if not features:
            ds.feature_shapes  # noqa: B018 - meta.json's x_shape checked: what a folder without x answers from
        return ds


#: the arrays of a prepared folder, checksummed in its checksums.json.
ARRAYS = ("x.npy", "y.npy", "graph/indptr.npy", "graph/indices.npy", "graph/e_id.npy") + tuple(
    f"split/{s}.npy" for s in SPLITS)


def _check_table(table: str, tables: Sequence[str]) -> None:
    """A ValueError naming `table` and the feature tables of the folder when it is not one of them."""
    if table not in tables:
        raise ValueError(f"table={table!r} is not accepted; this folder's feature tables: {list(tables)}")


def _read_json(path: Path) -> dict:
    return read_json(path, ValueError, ": prepare again")


def read_store_codec(path: Path) -> str:
    """The codec name a feature store's meta.json (`path`) records, checked (ValueError naming the file)."""
    codec = _read_json(path).get("codec")
    if not isinstance(codec, str):
        raise ValueError(f"{path}: codec={codec!r} is not accepted; expected the name of a codec: prepare again")
    return codec


def _load_npy(path: Path, mode: Optional[str]) -> np.ndarray:
    try:
        return np.load(path, mmap_mode=mode, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise ValueError(f"{path} is not a readable .npy array ({e}): the file is truncated or damaged; "
                         "prepare again") from None


def write_prepared_meta(directory: PathLike, *, name: str, num_classes: int, **extra) -> dict:
    """Write meta.json (last step of a preparation), with sizes read back from the folder."""
    d = Path(directory)
    graph = json.loads((d / "graph" / "meta.json").read_text())
    x = np.load(d / "x.npy", mmap_mode="r")
    meta = {"format": FORMAT, "version": FORMAT_VERSION, "name": name,
            "num_nodes": graph["num_nodes"], "num_edges": graph["num_edges"],
            "num_classes": int(num_classes), "x_shape": list(x.shape), "x_dtype": str(x.dtype),
            "split_sizes": {s: int(np.load(d / "split" / f"{s}.npy", mmap_mode="r").shape[0]) for s in SPLITS}}
    meta.update(extra)
    checksums.write_manifest(d, ARRAYS)
    write_text(d / "meta.json", json.dumps(meta, indent=2) + "\n")
    return meta


def encode_store(directory: PathLike, codec: CodecSpec = "auto", *, progress: bool = True,
                 out: Optional[PathLike] = None) -> dict:
    """Pre-encode `directory`/x.npy into `out` (default `directory`/store/x); return the meta.json entries.

    `codec` is "auto" (fit_codec's choice on a row sample: IBP, EBP, or identity when
    neither saves bytes), "ibp", "ebp", "identity" or a fitted codec. The entries name
    the codec chosen (store_codec), the store's fraction of the raw bytes and its size.
    """
    from .store import EncodedTable

    d = Path(directory)
    x = as_tensor(np.load(d / "x.npy", mmap_mode="r"))
    out = d / "store" / "x" if out is None else Path(out)
    with disk_full_error(out, x.numel() * x.element_size(), "the feature store (at most the features' size)"):
        table = EncodedTable.encode(x, codec, directory=out, progress=progress)
    return {"store_codec": table.codec.name, "store_fraction": table.fraction, "store_bytes": table.nbytes}


def add_store(directory: PathLike, codec: CodecSpec = "auto", *, progress: bool = True,
              kind: Optional[type] = None) -> dict:
    """Give a prepared folder without a feature store (``prepare --no-store``) one; nothing else is redone.

    The store is encoded in a work folder and moved into place, then meta.json gains
    its entries; a store another process finished meanwhile is kept (that process
    records it). `kind`: the folder's class (default PreparedDataset; any PreparedFolder with
    an x.npy). Returns meta.json's content.
    """
    d = Path(directory)
    store_dir = d / "store" / "x"
    if (store_dir / "meta.json").is_file():
        return _read_json(d / "meta.json")
    if not (kind or PreparedDataset).is_complete(d):
        raise FileNotFoundError(f"{d} is not a finished prepared data set (no valid meta.json): prepare it first")
    check_new_entry(d, "store", "the feature store")
    if not store_dir.parent.exists():
        store_dir.parent.mkdir()
        # recorded while empty (nothing of the user's in it): an add_store cut short leaves it behind, and the
        # folder must stay ibp-graph's own, replaceable by the next prepare
        note_output_entry(d, "store")
    with work_dir(store_dir) as tmp:
        entries = encode_store(d, codec, progress=progress, out=tmp)
        if (store_dir / "meta.json").is_file():
            return _read_json(d / "meta.json")
        replace_dir(tmp, store_dir)
    note_output_entry(d, "store")  # the folder's own, when it is prepared again
    meta = dict(_read_json(d / "meta.json"), **entries)
    write_text(d / "meta.json", json.dumps(meta, indent=2) + "\n")
    return meta


# ---------------------------------------------------------------------------------------------
# Out-of-core CSC construction


@numba.njit(cache=True, nogil=True)
def _count_in(dst, counts):
    for k in range(dst.shape[0]):
        counts[dst[k] + 1] += 1


@numba.njit(cache=True, nogil=True)
def _scatter(src, dst, e0, reverse_e0, fill, indices, e_id, undirected):
    """Place each edge in its destination's slice (and its reverse in its source's)."""
    for k in range(dst.shape[0]):
        d = dst[k]
        s = src[k]
        p = fill[d]
        fill[d] = p + 1
        indices[p] = s
        e_id[p] = e0 + k
        if undirected:
            p = fill[s]
            fill[s] = p + 1
            indices[p] = d
            e_id[p] = reverse_e0 + e0 + k


@numba.njit(cache=True, nogil=True)
def _dedup_segments(indptr, indices, e_id, lo, hi, new_counts):
    """Sort each node's in-neighbours (lo <= node < hi) and count the distinct ones."""
    for v in range(lo, hi):
        a, b = indptr[v], indptr[v + 1]
        if b - a > 1:
            seg = indices[a:b].copy()
            ids = e_id[a:b].copy()
            order = np.argsort(seg, kind="mergesort")
            for j in range(b - a):
                indices[a + j] = seg[order[j]]
                e_id[a + j] = ids[order[j]]
        n = 0
        for j in range(a, b):
            if j == a or indices[j] != indices[j - 1]:
                n += 1
        new_counts[v - lo] = n


@numba.njit(cache=True, nogil=True)
def _compact(indptr, indices, e_id, lo, hi, w):
    """Move each node's distinct in-neighbours to position w onwards (w never passes a read)."""
    for v in range(lo, hi):
        a, b = indptr[v], indptr[v + 1]
        for j in range(a, b):
            if j == a or indices[j] != indices[j - 1]:
                indices[w] = indices[j]
                e_id[w] = e_id[j]
                w += 1
    return w


def _edge_slices(n: int, step: int) -> Iterator[tuple[int, int]]:
    for lo in range(0, n, step):
        yield lo, min(n, lo + step)


def build_csc(edge_chunks: EdgeChunks, num_nodes: int, directory: PathLike, *, undirected: bool = False,
              dedup: bool = False, progress: bool = True, total_edges: Optional[int] = None) -> CSCGraph:
    """Build a CSCGraph on disk from a stream of edge chunks, never holding the edge list in memory.

    `edge_chunks()` is called twice (count, then place) and must yield the same
    `(src, dst)` int64 chunks each time. `undirected` adds every edge's reverse (edge id
    ``num_edges + k``, as ``torch.cat([ei, ei.flip(0)], 1)`` would number it); `dedup`
    removes repeated (source, destination) pairs, keeping each node's in-neighbours
    sorted by id, like PyG's ``to_undirected`` / ``coalesce``. Memory: two int64 arrays of
    ``num_nodes + 1`` plus one chunk; the indices and edge ids (32-bit where they fit) are written to memory-mapped
    files in ``directory`` (``CSCGraph.save`` layout) and returned memory-mapped.
    """
    d = Path(directory)
    indptr, num_edge_ids = _write_csc_arrays(edge_chunks, num_nodes, num_nodes, d, undirected=undirected,
                                             dedup=dedup, progress=progress, total_edges=total_edges)
    # num_edge_ids: the ids e_id draws from (the input's edges, and their reverses), which dedup keeps:
    # CSCGraph.load checks every e_id against it
    meta = {"format": "ibp_graph.csc", "version": 1, "num_nodes": num_nodes, "num_edges": int(indptr[-1]),
            "num_edge_ids": num_edge_ids}
    write_text(d / "meta.json", json.dumps(meta, indent=1) + "\n")
    return CSCGraph.load(d, mmap=True)


def build_relation_arrays(edge_chunks: EdgeChunks, num_src: int, num_dst: int, directory: PathLike, *,
                          undirected: bool = False, dedup: bool = False, progress: bool = True,
                          total_edges: Optional[int] = None) -> int:
    """Write the CSC arrays (indptr.npy over the `num_dst` destinations, indices.npy of source ids, e_id.npy)
    of one edge type of a heterogeneous graph into `directory`, streamed like `build_csc`; return the edge count.

    Source ids are checked against `num_src` and destinations against `num_dst` (two
    node types); `undirected` (an edge type within one node type only) and `dedup` as in `build_csc`.
    """
    if undirected and num_src != num_dst:
        raise ValueError(f"undirected=True needs one node type (num_src == num_dst); got num_src={num_src}, "
                         f"num_dst={num_dst}")
    indptr, _ = _write_csc_arrays(edge_chunks, num_src, num_dst, Path(directory), undirected=undirected,
                                  dedup=dedup, progress=progress, total_edges=total_edges)
    return int(indptr[-1])


def _write_csc_arrays(edge_chunks: EdgeChunks, num_src: int, num_dst: int, d: Path, *, undirected: bool,
                      dedup: bool, progress: bool, total_edges: Optional[int]) -> tuple[np.ndarray, int]:
    """indices.npy, e_id.npy and indptr.npy (by destination) in `d`; returns indptr and the number of edge
    ids e_id draws from (input edges, twice with `undirected`). `undirected` needs num_src == num_dst."""
    assert not undirected or num_src == num_dst
    d.mkdir(parents=True, exist_ok=True)
    counts = np.zeros(num_dst + 1, dtype=np.int64)
    n_input = 0
    bar = progress_bar(total_edges or 0, "graph: counting edges", progress, unit="edges")
    for src, dst in edge_chunks():
        src, dst = _int64(src), _int64(dst)
        _check_ids(src, dst, num_src, num_dst)
        _count_in(dst, counts)
        if undirected:
            _count_in(src, counts)
        n_input += dst.shape[0]
        bar.update(dst.shape[0])
    bar.close()
    indptr = np.cumsum(counts)
    num_edges = int(indptr[-1])
    fill = indptr[:-1].copy()
    indices = open_npy(d / "indices.npy", index_dtype(num_src), (num_edges,))
    e_id = open_npy(d / "e_id.npy", edge_id_dtype(num_edges), (num_edges,))
    indices, e_id = np.asarray(indices), np.asarray(e_id)  # plain ndarray views for the kernels
    e0 = 0
    bar = progress_bar(n_input, "graph: placing edges", progress, unit="edges")
    for src, dst in edge_chunks():
        src, dst = _int64(src), _int64(dst)
        _scatter(src, dst, np.int64(e0), np.int64(n_input), fill, indices, e_id, undirected)
        e0 += dst.shape[0]
        bar.update(dst.shape[0])
    bar.close()
    if e0 != n_input:
        raise RuntimeError(f"edge_chunks() yielded {n_input} edges the first time and {e0} the second; "
                           "it must yield the same chunks on every call")
    del fill
    if dedup and num_edges:
        indptr = _dedup_csc(d, indptr, indices, e_id, progress)
    del indices, e_id  # shared file mappings: what was written is visible to the next open
    save_npy(d / "indptr.npy", indptr)
    return indptr, n_input * (2 if undirected else 1)


def _dedup_csc(d: Path, indptr: np.ndarray, indices: np.ndarray, e_id: np.ndarray, progress: bool) -> np.ndarray:
    """Remove repeated in-neighbours in place; rewrite indices.npy and e_id.npy at the new length."""
    n = indptr.shape[0] - 1
    new_counts = np.zeros(n, dtype=np.int64)
    step = 1 << 20
    bar = progress_bar(n, "graph: removing duplicate edges", progress, unit="nodes")
    for lo, hi in _edge_slices(n, step):
        _dedup_segments(indptr, indices, e_id, lo, hi, new_counts[lo:hi])
        bar.update(hi - lo)
    w = 0
    for lo, hi in _edge_slices(n, step):
        w = _compact(indptr, indices, e_id, lo, hi, np.int64(w))
    bar.close()
    new_indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(new_counts, out=new_indptr[1:])
    assert int(new_indptr[-1]) == w
    for name, arr in (("indices", indices), ("e_id", e_id)):
        tmp = open_npy(d / f"{name}.tmp.npy", arr.dtype, (w,))
        for lo, hi in _edge_slices(w, EDGE_CHUNK):
            tmp[lo:hi] = arr[lo:hi]
        tmp.flush()
        del tmp
    del indices, e_id
    for name in ("indices", "e_id"):
        os.replace(d / f"{name}.tmp.npy", d / f"{name}.npy")
    return new_indptr


def _int64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


class EdgeIdError(ValueError):
    """An edge chunk names a node outside the graph (a reader turns it into an error naming its file)."""


def _check_ids(src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int) -> None:
    if src.shape != dst.shape or src.ndim != 1:
        raise ValueError(f"an edge chunk has src shape {src.shape} and dst shape {dst.shape}; "
                         "expected two 1-d arrays of the same length")
    for ids, n, what in ((src, num_src, "source"), (dst, num_dst, "destination")):
        if ids.size:
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= n:
                raise EdgeIdError(f"an edge names {what} node {lo if lo < 0 else hi}, outside [0, {n})")
