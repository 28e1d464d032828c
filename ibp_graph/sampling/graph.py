"""Compressed sparse column (CSC) graph: the in-edges of every node, for neighbour sampling."""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, TypeVar, Union

import numba
import numpy as np
import torch

from ..index_checks import first_bad_step, first_outside, first_repeat
from ..files import read_json, save_npy, write_text
from ..jit_cache import install as _install_kernel_cache

_install_kernel_cache()  # numba caches this module's kernels per environment (ibp_graph.jit_cache)

__all__ = ["CSCGraph", "TypedCSC", "as_numpy", "check_edge_ids", "check_int", "check_time", "edge_id_dtype",
           "index_dtype", "real_values", "sorted_by_time", "time_order", "time_sorted_check"]

ArrayLike = Union[torch.Tensor, np.ndarray]

_FORMAT = "ibp_graph.csc"
_FORMAT_VERSION = 1
_FILES = ("indptr", "indices", "e_id")


def index_dtype(count: int) -> np.dtype:
    """int32 when ids ``0 .. count - 1`` fit in it, else int64. ogbn-papers100M's 111 M node
    ids fit (its ``indices`` take 13 GB instead of 26); the 3.2 G edge ids of its undirected
    form do not (1.6 G directed ones would)."""
    return np.dtype(np.int32) if count <= np.iinfo(np.int32).max + 1 else np.dtype(np.int64)


def edge_id_dtype(count: int) -> np.dtype:
    """The dtype of ``e_id`` for edge ids ``0 .. count - 1``: int32 when they fit in it, uint32 when they fit
    in 32 bits, else int64. The 3.2 G edge ids of ogbn-papers100M's undirected form fit in uint32: its
    ``e_id`` takes 13 GB instead of 26. Edge ids are read only by the sampler (which widens them to int64)
    and by numpy; a batch's ``e_id`` is int64 whatever this dtype."""
    if count <= np.iinfo(np.int32).max + 1:
        return np.dtype(np.int32)
    return np.dtype(np.uint32) if count <= np.iinfo(np.uint32).max + 1 else np.dtype(np.int64)


@numba.njit(cache=True, nogil=True)
def _counting_sort_by_dst(src, dst, num_nodes, indices, e_id):
    """Stable counting sort of edges by destination into indices and e_id; returns indptr."""
    num_edges = dst.shape[0]
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    for e in range(num_edges):
        indptr[dst[e] + 1] += 1
    for v in range(num_nodes):
        indptr[v + 1] += indptr[v]
    fill = indptr[:-1].copy()
    for e in range(num_edges):
        p = fill[dst[e]]
        fill[dst[e]] = p + 1
        indices[p] = src[e]
        e_id[p] = e
    return indptr


def as_numpy(name: str, value: ArrayLike, *, integer: bool = False) -> np.ndarray:
    """`value` (a CPU tensor or a numpy array) as a numpy array; `integer`: refuse a non-integer dtype."""
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise ValueError(f"{name} must be on the CPU, got device {value.device}")
        dtype, is_int = value.dtype, not (value.dtype == torch.bool or value.dtype.is_floating_point
                                          or value.dtype.is_complex)
    elif isinstance(value, np.ndarray):
        dtype, is_int = value.dtype, value.dtype != np.bool_ and np.issubdtype(value.dtype, np.integer)
    else:
        raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(value).__name__}")
    if integer and not is_int:
        raise TypeError(f"{name} must have an integer dtype (int32 or int64), got {dtype}")
    return value.detach().numpy() if isinstance(value, torch.Tensor) else value


def check_int(name: str, value: object, *, minimum: Optional[int]) -> int:
    """`value` as an int >= `minimum` (None: any int), or an error naming `name`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int{'' if minimum is None else f' >= {minimum}'}, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    return int(value)


def real_values(name: str, value, count: Optional[int], per: str = "") -> np.ndarray:
    """`value` (a tensor or array-like) as a numpy array of `count` integer or float values (None: any number,
    1-d), or an error."""
    if isinstance(value, torch.Tensor):  # bfloat16 has no numpy dtype: its float32 values, exactly
        value = value.detach().cpu()
        a = (value.float() if value.dtype == torch.bfloat16 else value).numpy()
    else:
        a = np.asarray(value)
    if a.dtype == np.bool_ or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{name} has dtype {a.dtype}; accepted: a real (float or integer) dtype")
    accepted = "1-d" if count is None else f"shape ({count},)"
    if a.ndim != 1 or (count is not None and a.shape[0] != count):
        raise ValueError(f"{name} has shape {tuple(a.shape)}; accepted: {per}{accepted}")
    return a


def check_time(name: str, value, count: int, per: str = "") -> Optional[np.ndarray]:
    """Times as a 1-d int64 or float64 array of `count` entries (or None); `per` says what each times, in errors."""
    if value is None:
        return None
    t = real_values(name, value, count, per)
    if t.dtype.kind == "u" and t.size and int(t.max()) > np.iinfo(np.int64).max:  # would wrap in the cast
        raise ValueError(f"{name} holds {int(t.max())}; accepted: integer times below 2**63")
    t = t.astype(np.int64 if np.issubdtype(t.dtype, np.integer) else np.float64)
    if t.dtype == np.float64 and np.isnan(t).any():
        raise ValueError(f"{name} holds NaN; accepted: comparable times")
    return np.ascontiguousarray(t)


def check_edge_ids(e_id: np.ndarray, num_edge_ids: Optional[int]) -> None:
    """Raise ValueError unless `e_id` holds distinct edge ids in [0, num_edge_ids) (None: any ids >= 0).

    One pass for the range and one bitmap pass for repeats (a graph's ``indices`` are checked the same way)."""
    if num_edge_ids is not None:
        check_int("num_edge_ids", num_edge_ids, minimum=e_id.shape[0])
    hi = num_edge_ids if num_edge_ids is not None else np.iinfo(np.int64).max
    bad = first_outside(e_id, 0, hi)
    if bad >= 0:
        accepted = f"[0, num_edge_ids={num_edge_ids})" if num_edge_ids is not None else "ids >= 0"
        raise ValueError(f"e_id must name edges in {accepted}; e_id[{bad}]={int(e_id[bad])}")
    if num_edge_ids is None and e_id.shape[0]:
        hi = int(e_id.max()) + 1
    bad = first_repeat(e_id, hi)
    if bad >= 0:
        raise ValueError(f"e_id must name every edge once; e_id[{bad}]={int(e_id[bad])} repeats an earlier "
                         f"entry")


def _edge_index_csc(edge_index: ArrayLike, num_src: int, num_dst: int, homogeneous: bool):
    """indptr, indices and e_id of PyG's ``2 x E`` `edge_index` (row 0: source ids below `num_src`, row 1:
    destination ids below `num_dst`), each destination's in-edges in edge order."""
    ei = as_numpy("edge_index", edge_index, integer=True)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index must have shape (2, num_edges), got {tuple(ei.shape)}")
    for row, ids, n, what in ((0, ei[0], num_src, "source"), (1, ei[1], num_dst, "destination")):  # before the cast
        lo, hi = (int(ids.min()), int(ids.max())) if ids.size else (0, -1)
        if lo < 0 or hi >= n:
            raise ValueError(f"edge_index[{row}] contains {what} node id {lo if lo < 0 else hi}, outside the valid "
                             f"range [0, {n}) " + (f"for num_nodes={n}" if homogeneous else "of its node type"))
    src = np.ascontiguousarray(ei[0], dtype=np.int64)  # (uint64 ids above 2**63 - 1 would wrap in it)
    dst = np.ascontiguousarray(ei[1], dtype=np.int64)
    indices = np.empty(src.shape[0], dtype=index_dtype(num_src))
    e_id = np.empty(src.shape[0], dtype=edge_id_dtype(src.shape[0]))
    return _counting_sort_by_dst(src, dst, num_dst, indices, e_id), indices, e_id


@dataclass(frozen=True, eq=False)
class _CSC:
    """The arrays and checks :class:`CSCGraph` and :class:`TypedCSC` share."""

    indptr: np.ndarray
    indices: np.ndarray
    e_id: Optional[np.ndarray]

    @property
    def positional_ids(self) -> bool:
        """Whether edge ids are CSC positions (``e_id`` None: a graph given in CSC order, as ``adj_t`` or a
        stored CSC): nothing holds them, the sampler writes positions, and ``e_id`` costs no memory until
        :meth:`checked_e_id` is asked for it."""
        return self.e_id is None

    @property
    def e_id_dtype(self) -> np.dtype:
        """The dtype of ``e_id`` (:func:`edge_id_dtype` of the edge count for positional ids)."""
        return edge_id_dtype(self.num_edges) if self.e_id is None else self.e_id.dtype

    def in_csc_order(self, values: np.ndarray) -> np.ndarray:
        """`values` (one per edge id: times, weights) in CSC order; positional ids: `values` itself."""
        return values[:self.num_edges] if self.e_id is None else values[self.checked_e_id()]

    def checked_e_id(self) -> np.ndarray:
        """``e_id``, checked (:func:`check_edge_ids`) before its first use for a graph made with
        ``defer_e_id_check=True`` (``load``'s: a batch without edge ids never reads them, nor their pages);
        ValueError naming the graph's folder for a damaged one. What reads ``e_id`` reads it through this.
        Positional ids (``e_id`` None) are made here, once: ``0 .. num_edges - 1``."""
        if self.e_id is None:
            made = self.__dict__.get("_e_id_made")
            if made is None:
                made = np.arange(self.num_edges, dtype=self.e_id_dtype)
                object.__setattr__(self, "_e_id_made", made)
            return made
        pending = self.__dict__.get("_e_id_pending")
        if pending is not None:
            try:
                check_edge_ids(self.e_id, self.num_edge_ids)
            except ValueError as e:
                raise ValueError(f"{pending} is not a valid graph: {e}") from None
            object.__setattr__(self, "_e_id_pending", None)
        return self.e_id

    @property
    def num_dst(self) -> int:
        """Number of destination nodes (``len(indptr) - 1``)."""
        return self.indptr.shape[0] - 1

    @property
    def num_edges(self) -> int:
        return self.indices.shape[0]

    @property
    def edge_value_count(self) -> int:
        """Entries of a per-edge array (times, weights) that ``e_id`` indexes: ``num_edge_ids`` when recorded
        (more than ``num_edges`` once repeated edges were removed), else ``num_edges``."""
        return self.num_edges if self.num_edge_ids is None else self.num_edge_ids

    def in_degree(self) -> np.ndarray:
        """Number of in-edges of every destination node (int64)."""
        return np.diff(self.indptr)

    def _check(self, rows: str, what: str, bound_name: str, bound: Optional[int], defer: Union[bool, str]) -> None:
        """dtypes; indptr's length, range and steps; every source id (`what`) below `bound` (None: the
        destinations' count, a homogeneous graph's nodes); e_id (:func:`check_edge_ids`) now, or with `defer`
        (True, or the name of the graph's folder for the error) at its first use (:meth:`checked_e_id`);
        positional ids (``e_id`` None) need only ``num_edge_ids``, if given, to be at least ``num_edges``."""
        indptr, indices, e_id = self.indptr, self.indices, self.e_id
        named = (("indptr", indptr), ("indices", indices)) + ((("e_id", e_id),) if e_id is not None else ())
        for name, arr in named:
            accepted = {"indptr": ("int64",), "indices": ("int32", "int64"), "e_id": ("int32", "uint32", "int64")}[name]
            if not isinstance(arr, np.ndarray) or arr.dtype.name not in accepted or arr.ndim != 1:
                raise TypeError(f"{name} must be a 1-d numpy array of {' or '.join(accepted)}, got "
                                f"{type(arr).__name__} {getattr(arr, 'dtype', '')} {getattr(arr, 'shape', '')}")
            if not arr.dtype.isnative:  # numba reads no other byte order
                raise TypeError(f"{name} must be a 1-d numpy array of {' or '.join(accepted)} in native byte "
                                f"order, got dtype {arr.dtype.str!r}; accepted: {name}.astype({arr.dtype.name!r})")
        if bound is not None:
            check_int(bound_name, bound, minimum=0)
        if indptr.shape[0] < 1:
            raise ValueError(f"indptr must have {rows} + 1 >= 1 entries, got 0")
        bound = indptr.shape[0] - 1 if bound is None else bound
        if e_id is not None and e_id.shape != indices.shape:
            raise ValueError(f"e_id must have one entry per edge ({indices.shape[0]}), got {e_id.shape[0]}")
        first, last = int(indptr[0]), int(indptr[-1])
        if first != 0 or last != indices.shape[0]:
            raise ValueError(f"indptr must start at 0 and end at num_edges={indices.shape[0]}, "
                             f"got indptr[0]={first}, indptr[-1]={last}")
        bad = first_bad_step(indptr)
        if bad >= 0:
            raise ValueError(f"indptr must be non-decreasing; indptr[{bad}]={int(indptr[bad])} > "
                             f"indptr[{bad + 1}]={int(indptr[bad + 1])}")
        bad = first_outside(indices, 0, bound)
        if bad >= 0:
            raise ValueError(f"indices must name {what} in [0, {bound_name}={bound}); indices[{bad}]={int(indices[bad])}")
        if e_id is None:
            if self.num_edge_ids is not None:
                check_int("num_edge_ids", self.num_edge_ids, minimum=indices.shape[0])
        elif defer:
            object.__setattr__(self, "_e_id_pending", "the graph" if defer is True else defer)
        else:
            check_edge_ids(e_id, self.num_edge_ids)


@dataclass(frozen=True, eq=False)
class CSCGraph(_CSC):
    """A directed graph stored by destination, so a node's in-neighbours are one slice.

    ``indices[indptr[v]:indptr[v + 1]]`` are the sources of the edges pointing to ``v``
    (PyG's ``edge_index[0]`` where ``edge_index[1] == v``, in original edge order) and
    ``e_id`` holds, for each CSC position, the edge's column in the original
    ``edge_index``. All three are 1-d numpy arrays (possibly read-only memory maps):
    ``indptr`` int64, ``indices`` int32 or int64 (``index_dtype`` of the node count: int32
    whenever the ids fit), ``e_id`` int32, uint32 or int64 (``edge_id_dtype`` of the edge count).
    ``e_id`` None: edge ids are CSC positions (a graph that comes in CSC order, as PyG's
    ``adj_t``), held nowhere (:attr:`positional_ids`).

    ``num_edge_ids`` is the number of edge ids ``e_id`` draws from (the columns of that
    ``edge_index``, the rows of its edge attributes; at least ``num_edges``, more when
    repeated edges were removed): ``e_id`` must name distinct edges in
    ``[0, num_edge_ids)``. ``from_edge_index`` records it, ``save`` and ``load`` keep it;
    None (not recorded) checks only that the ids are distinct and non-negative.

    ``defer_e_id_check`` (True, or a name for errors, e.g. the folder) checks ``e_id`` at its
    first use (:meth:`checked_e_id`) instead of now; every other array is checked now.
    """

    num_edge_ids: Optional[int] = None
    defer_e_id_check: Union[bool, str] = dataclasses.field(default=False, kw_only=True, repr=False)

    def __post_init__(self) -> None:
        self._check("num_nodes", "nodes", "num_nodes", None, self.defer_e_id_check)

    @property
    def num_nodes(self) -> int:
        return self.num_dst

    @property
    def num_src(self) -> int:
        """Number of source nodes (``num_nodes``: :class:`TypedCSC`'s, for a homogeneous graph's one edge type)."""
        return self.num_dst

    @classmethod
    def from_edge_index(cls, edge_index: ArrayLike, num_nodes: int) -> "CSCGraph":
        """Build from PyG's ``2 x E`` ``edge_index`` (row 0 = source, row 1 = destination)."""
        num_nodes = check_int("num_nodes", num_nodes, minimum=0)
        indptr, indices, e_id = _edge_index_csc(edge_index, num_nodes, num_nodes, homogeneous=True)
        return cls(indptr, indices, e_id, indices.shape[0])

    def save(self, directory: Union[str, os.PathLike]) -> Path:
        """Write ``indptr.npy``, ``indices.npy``, ``e_id.npy`` and ``meta.json`` to a folder, each atomically."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        for name in _FILES:
            arr = getattr(self, name)
            if arr is None:  # positional ids, written out (load reads every graph's e_id.npy)
                arr = np.arange(self.num_edges, dtype=self.e_id_dtype)
            save_npy(path / f"{name}.npy", np.ascontiguousarray(arr))
        meta = {"format": _FORMAT, "version": _FORMAT_VERSION, "num_nodes": self.num_nodes, "num_edges": self.num_edges}
        if self.num_edge_ids is not None:
            meta["num_edge_ids"] = self.num_edge_ids
        write_text(path / "meta.json", json.dumps(meta, indent=1) + "\n")
        return path

    @classmethod
    def load(cls, directory: Union[str, os.PathLike], *, mmap: bool = True) -> "CSCGraph":
        """Read a folder written by :meth:`save`, checking its structure; ``mmap=True`` maps the arrays read-only.

        A damaged file raises ValueError naming it and what is wrong (a graph that would
        make the sampler read outside its arrays never gets that far). ``e_id`` is mapped
        here and checked at its first use (:meth:`checked_e_id`: a sampler made with
        ``edge_ids=True``, a time or weight per edge): papers100M's 3.2 G edge ids
        are read at start-up only by a run that needs them.
        """
        path = Path(directory)
        meta_path = path / "meta.json"
        if not meta_path.is_file():
            raise FileNotFoundError(f"directory {str(path)!r} holds no meta.json; expected a folder written "
                                    f"by CSCGraph.save")
        meta = read_json(meta_path, ValueError, " (CSCGraph.save's meta.json)")
        if meta.get("format") != _FORMAT or meta.get("version") != _FORMAT_VERSION:
            raise ValueError(f"directory {str(path)!r} has format {meta.get('format')!r} version "
                             f"{meta.get('version')!r}; expected {_FORMAT!r} version {_FORMAT_VERSION}")
        for key in ("num_nodes", "num_edges", "num_edge_ids"):
            if not isinstance(meta.get(key), int) and (key != "num_edge_ids" or key in meta):
                raise ValueError(f"{meta_path}: {key}={meta.get(key)!r} is not accepted; expected an integer")
        arrays = {}
        for name in _FILES:
            f = path / f"{name}.npy"
            try:
                arrays[name] = np.load(f, mmap_mode="r" if mmap else None, allow_pickle=False)
            except (OSError, ValueError, EOFError) as e:
                raise ValueError(f"{f} is not a readable .npy array ({e}): the file is missing, truncated "
                                 "or damaged") from None
        try:  # e_id checked at its first use: batches without edge ids never read it (nor its pages)
            graph = cls(**arrays, num_edge_ids=meta.get("num_edge_ids"), defer_e_id_check=str(path))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path} is not a valid graph: {e}") from None
        if graph.num_nodes != meta["num_nodes"] or graph.num_edges != meta["num_edges"]:
            raise ValueError(f"directory {str(path)!r}: arrays hold {graph.num_nodes} nodes and {graph.num_edges} "
                             f"edges, meta.json says {meta['num_nodes']} and {meta['num_edges']}")
        return graph

    def __repr__(self) -> str:
        return f"CSCGraph(num_nodes={self.num_nodes}, num_edges={self.num_edges})"


@dataclass(frozen=True, eq=False)
class TypedCSC(_CSC):
    """The edges of one edge type ``(src, rel, dst)``, stored by destination.

    ``indices[indptr[v]:indptr[v + 1]]`` are the sources (ids of ``src`` nodes, below
    ``num_src``) of the edges into ``dst`` node ``v``, in original edge order; ``e_id``
    holds each one's column in the type's ``edge_index`` (None: CSC positions, as
    :class:`CSCGraph`'s). Like :class:`CSCGraph`, except
    that sources and destinations are ids of different node types; ``num_edge_ids`` is
    :class:`CSCGraph`'s (``e_id`` names distinct edges below it; None: not recorded).
    """

    num_src: int
    num_edge_ids: Optional[int] = None
    defer_e_id_check: Union[bool, str] = dataclasses.field(default=False, kw_only=True, repr=False)

    def __post_init__(self) -> None:
        self._check("num_dst", "source nodes", "num_src", self.num_src, self.defer_e_id_check)

    @classmethod
    def from_edge_index(cls, edge_index: ArrayLike, num_src: int, num_dst: int,
                        time: Optional[ArrayLike] = None) -> "TypedCSC":
        """Build from PyG's ``2 x E`` ``edge_index`` of one edge type (row 0: source ids, row 1: destination ids).

        With `time` (one integer or float value per edge, in edge order: the edge's time, or its
        source node's; checked as the samplers check times, :func:`check_time`), each
        destination's in-edges are ordered by it (ties in edge order), as PyG orders them
        for temporal sampling; otherwise in edge order.
        """
        num_src = check_int("num_src", num_src, minimum=0)
        num_dst = check_int("num_dst", num_dst, minimum=0)
        indptr, indices, e_id = _edge_index_csc(edge_index, num_src, num_dst, homogeneous=False)
        graph = cls(indptr, indices, e_id, num_src, indices.shape[0])
        if time is None:
            return graph
        time = check_time("time", time, indices.shape[0], "one value per edge, ")
        return sorted_by_time(graph, time[e_id])

    def __repr__(self) -> str:
        return f"TypedCSC(num_src={self.num_src}, num_dst={self.num_dst}, num_edges={self.num_edges})"


Graph = TypeVar("Graph", CSCGraph, TypedCSC)


def time_order(graph: Union[CSCGraph, TypedCSC], key: np.ndarray) -> np.ndarray:
    """The CSC positions of `graph` with each destination's in-edges ordered by `key` (one value per CSC
    position: the edge's time, or its source node's), ties in CSC order (int64): position ``p`` of
    :func:`sorted_by_time`'s graph holds the edge at position ``order[p]`` of `graph`."""
    key = np.asarray(key)
    if key.shape != (graph.num_edges,):
        raise ValueError(f"key has shape {tuple(key.shape)}; accepted: one value per CSC position, shape "
                         f"({graph.num_edges},)")
    dst = np.repeat(np.arange(graph.indptr.shape[0] - 1, dtype=np.int64), np.diff(graph.indptr))
    return np.lexsort((key, dst))  # stable: ties keep CSC order


def sorted_by_time(graph: Graph, key: np.ndarray) -> Graph:
    """`graph` with each destination's in-edges ordered by `key` (one value per CSC position: the edge's
    time, or its source node's), ties in CSC order: the order temporal sampling needs (as PyG's). Its
    ``e_id`` keeps each edge's id (positional ids: the edge's position in `graph`); a sampler that reports
    no edge ids can do without it (``NeighborSampler(edge_ids=False)`` sorts by :func:`time_order`)."""
    order = time_order(graph, key)
    # positional ids: the order itself (no copy when e_id's dtype is int64, as order's)
    e_id = order.astype(graph.e_id_dtype, copy=False) if graph.positional_ids else graph.checked_e_id()[order]
    return dataclasses.replace(graph, indices=np.ascontiguousarray(graph.indices[order]),
                               e_id=np.ascontiguousarray(e_id), defer_e_id_check=False)


def time_sorted_check(name: str, indptr: np.ndarray, key: np.ndarray) -> None:
    """Raise ValueError unless `key` (one value per CSC position) ascends within each destination's in-edges."""
    seg = np.repeat(np.arange(indptr.shape[0] - 1), np.diff(indptr))
    bad = np.flatnonzero((key[1:] < key[:-1]) & (seg[1:] == seg[:-1]))
    if bad.size:
        raise ValueError(f"{name} is not sorted by time within the in-edges of destination {int(seg[bad[0]])}; "
                         "build it with TypedCSC.from_edge_index(..., time=...) or sorted_by_time")
