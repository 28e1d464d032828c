"""CompressedDGLDataLoader: DGL's DataLoader, with the prefetched features compressed on the way to `device`.

DGL's loader samples in its workers and fetches the features the sampler marks lazy
(``prefetch_node_feats``, ``prefetch_labels``, ``prefetch_edge_feats``: ``LazyFeature`` columns) in the
main process. This loader *is* DGL's (a subclass: same shuffling, worker seeding and batches) with that
fetch moved into the workers: they read those rows by the graphs' ``dgl.NID`` / ``dgl.EID`` exactly as
DGL would, from the graph's tensors or the loader's feature sources (pipeline.sources: `node_stores`,
zero-copy, a device cache), and encode them with the batch producer of every front-end
(pipeline.producer) into a shared-memory slot (pipeline.transport: the hand-over copies nothing, and a
page-locked slot needs no pin-memory copy). The main process decodes them on `device` and puts them where
DGL would, through DGL's views (``blocks[0].srcdata``, ``blocks[-1].dstdata``, ``block.edata``, per
type on heterogeneous graphs). Other columns a sampled graph carries (lazy slices of the parent's
features) cross as their row index only and are re-attached to the parent's storage here. DGL's
internals are read only where it has no public API (a frame's columns: _columns, _detach).

Needs dgl 2.1 (the newest Linux wheel), which loads only with torch <= 2.2.1 and numpy < 2: ``make
test-dgl`` builds such an environment (.venv-dgl). Importing this module imports dgl with the backend
it picks itself and changes neither that nor ``os.environ``; a backend other than PyTorch is refused.
What a loader changes in the process is ``loaders/_common.start`` (README: "What a loader changes in
the process").
"""
from __future__ import annotations

import functools
import os
import time
import warnings
import weakref
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from ibp_graph.codec.base import Codec
from ibp_graph.data.store import EncodedTable
from ibp_graph.index_checks import first_bad_step, first_outside, first_repeat
from ibp_graph.loaders import _common
from ibp_graph.pipeline.batch import DecodedBatch, EncodedBatch
from ibp_graph.pipeline.cache import degree_hotness
from ibp_graph.pipeline.codec_setup import CodecSpec
from ibp_graph.pipeline.features import codec_tables, plan_features
from ibp_graph.pipeline.grouping import GroupKey
from ibp_graph.pipeline.producer import BatchPlan, produce, warm_gathers
from ibp_graph.pipeline.requests import check_batch_size
from ibp_graph.pipeline.sources import FeatureSource, Origin, TensorSource, as_source
from ibp_graph.pipeline.transport import OutputBuffers, SlotRing

_INSTALL = ("pip install 'dgl==2.1.0' 'torch==2.2.1' 'numpy<2' 'torchdata==0.7.1' pandas pydantic "
            "(or `make venv-dgl`, which builds .venv-dgl)")


def _import_dgl():
    """dgl, with the backend it picks itself (DGLBACKEND, else its config file, else PyTorch); any
    backend but pytorch is refused. Nothing here sets DGLBACKEND."""
    import dgl

    if dgl.backend.backend_name != "pytorch":
        raise ImportError(f"ibp_graph.loaders.dgl needs dgl's pytorch backend; dgl runs "
                          f"{dgl.backend.backend_name!r} (DGLBACKEND={os.environ.get('DGLBACKEND')!r}): "
                          "set DGLBACKEND=pytorch")
    return dgl


try:
    dgl = _import_dgl()
    from dgl.dataloading import DataLoader as _DGLDataLoader
    from dgl.dataloading import Sampler as _DGLSampler
    from dgl.frame import LazyFeature
except ImportError as e:
    if "backend" in str(e) and "DGLBACKEND" in str(e):
        raise
    raise ImportError(f"ibp_graph.loaders.dgl needs dgl ({e}); install it with: {_INSTALL}") from e
except Exception as e:  # dgl is there but cannot load, e.g. its libraries built for another torch
    raise ImportError(f"ibp_graph.loaders.dgl needs a dgl that loads with this torch "
                      f"({torch.__version__}); importing dgl failed with {type(e).__name__}: {e}. "
                      f"dgl 2.1.0 loads with torch 2.0-2.2.1 only: {_INSTALL}") from e

__all__ = ["CompressedDGLDataLoader"]

NODE, EDGE = "node", "edge"


#: the public views of a graph's columns: a block's source and destination nodes, a graph's nodes, edges
SRC, DST, NODES, EDGES = "srcnodes", "dstnodes", "nodes", "edges"


@dataclass(frozen=True)
class _Slot:
    """Where one fetched feature goes: ``graphs[graph].<side>[type_].data[key]`` (DGL's public views)."""

    graph: int  # index into the batch's list of graphs (_graphs: pair graphs, then blocks)
    side: str   # SRC, DST, NODES or EDGES
    type_: Any  # node type, or canonical edge type
    key: str
    where: str = ""  # the graph's place in DGL's batch: "blocks[0]", "pair_graph", "neg_pair_graph"

    @property
    def name(self) -> str:
        """The tensor's name inside the EncodedBatch (the slot's place, for messages)."""
        return f"{self.where}.{self.side}[{self.type_!r}].data[{self.key!r}]"

    def view(self, g):
        """The slot's data view (node or edge frame) on `g`, the batch's graph number `graph`."""
        return getattr(g, self.side)[self.type_].data


@dataclass(frozen=True)
class _Detached:
    """A column sliced lazily from the parent graph's column of type `parent_type`, sent without its
    storage (only its row index) and re-attached to the parent's in the main process."""

    slot: _Slot
    parent_type: Any


@dataclass(frozen=True)
class _FromGraph:
    """A fetched feature the worker read from the parent graph's own column `key` of `kind` (NODE, EDGE)
    and type `slot.type_` (not from a feature source), by the LazyFeature's `ids` (None: the sampled graph's
    dgl.NID / dgl.EID): what the main process reads again when that column changed after the fork."""

    slot: _Slot
    kind: str
    key: str
    ids: Optional[torch.Tensor] = None


@dataclass(frozen=True)
class _Meta:
    """The front-end's pass-through in an EncodedBatch: the slots, the detached columns and the slots read
    from the graph's own columns (from the worker) and, once in the main process, the sampler's result that
    DGL moved to `device` ((input_nodes, output_nodes, blocks), an edge-wise sampler's (input_nodes,
    pair_graph, [neg_pair_graph,] blocks), a subgraph sampler's one graph, or what a custom sampler returns:
    _graphs)."""

    slots: tuple[_Slot, ...]
    detached: tuple[_Detached, ...] = ()
    from_graph: tuple[_FromGraph, ...] = ()
    sampled: Any = None


class _Encoded:
    """One batch's compressed features inside DGL's pipeline (the second item of (sampler's result, _Encoded)).

    DGL moves every leaf of a batch with ``.to(device, non_blocking=True)`` and torch's
    pin-memory thread calls ``.pin_memory()``; the compressed groups stay on the host
    (pinned when the device is a GPU) until the decode stage copies them on its stream.
    """

    __slots__ = ("batch",)

    def __init__(self, batch: EncodedBatch):
        self.batch = batch

    def to(self, device, non_blocking: bool = False) -> "_Encoded":
        """Unchanged: the decode stage does the copy."""
        return self

    def pin_memory(self) -> "_Encoded":
        """Page-locked copy of every compressed group."""
        return _Encoded(self.batch.pin_memory())


def _graphs(out: Any) -> list[tuple[str, Any]]:
    """(place, graph) of every DGLGraph in a sampler's result, in one order for the worker and the main
    process: a node-wise sampler's (input_nodes, output_nodes, blocks) as ``blocks[i]``, an edge-wise one's
    (input_nodes, pair_graph, [neg_pair_graph,] blocks), as dgl.dataloading.EdgePredictionSampler returns
    them, as ``pair_graph``, ``neg_pair_graph``, ``blocks[i]``, one subgraph (ClusterGCNSampler,
    SAINTSampler) as ``subgraph``; any other result a custom sampler returns (tuples, lists, dicts, nested,
    which DGL's loader takes as they are) by its path, e.g. ``out[3]['g']``."""
    if isinstance(out, dgl.DGLGraph):
        return [("subgraph", out)]
    named = _dgls_forms(out)
    if named is not None:
        return named
    found: list = []

    def walk(x, path: str) -> None:  # in the order of DGL's recursive_apply, which moves the batch
        if isinstance(x, dgl.DGLGraph):
            found.append((path, x))
        elif isinstance(x, Mapping):
            for k, v in x.items():
                walk(v, f"{path}[{k!r}]")
        elif isinstance(x, Sequence) and not isinstance(x, (str, bytes)):
            for i, v in enumerate(x):
                walk(v, f"{path}[{i}]")
    walk(out, "out")
    return found


def _dgls_forms(out: Any) -> Optional[list[tuple[str, Any]]]:
    """The graphs of DGL's samplers' results, named as DGL's documentation names them; None for any other."""
    if not (isinstance(out, tuple) and len(out) in (3, 4)):
        return None
    many = isinstance(out[-1], (list, tuple))
    blocks = list(out[-1]) if many else [out[-1]]
    pairs = [("pair_graph", out[1])] + ([("neg_pair_graph", out[2])] if len(out) == 4 else [])
    if len(out) == 3 and not isinstance(out[1], dgl.DGLGraph):  # node-wise: out[1] is output_nodes
        pairs = []
    named = pairs + [(f"blocks[{i}]" if many else "blocks", g) for i, g in enumerate(blocks)]
    return named if all(isinstance(g, dgl.DGLGraph) for _, g in named) else None


def _sides(g) -> list[tuple[str, str, Any]]:
    """(kind, side, type) of each of a graph's column views: a block's source and destination node
    types, a graph's node types, then the edge types."""
    if g.is_block:
        nodes = [(NODE, SRC, t) for t in g.srctypes] + [(NODE, DST, t) for t in g.dsttypes]
    else:
        nodes = [(NODE, NODES, t) for t in g.ntypes]
    return nodes + [(EDGE, EDGES, et) for et in g.canonical_etypes]


def _columns(g, side: str, type_) -> dict:
    """The Column objects of one of a graph's frames, by key.

    DGL has no public API for this: its views (``g.srcnodes[t].data[key]``) return a column's
    data, which for a column sliced lazily from the parent graph runs the slice (a gather in the
    worker, and the whole slice pickled); DGL's own prefetcher reads ``frame._columns`` alike to
    find LazyFeature placeholders, and to drop parent storage before pickling.
    """
    if side == EDGES:
        return g._edge_frames[g.get_etype_id(type_)]._columns
    tid = {SRC: g.get_ntype_id_from_src, DST: g.get_ntype_id_from_dst, NODES: g.get_ntype_id}[side](type_)
    return g._node_frames[tid]._columns


def _parent_type(parent, kind: str, type_) -> Optional[Any]:
    """The parent graph's type of a sampled graph's node or edge type (None: a type the sampler made up;
    such columns are left alone)."""
    return type_ if type_ in (parent.ntypes if kind == NODE else parent.canonical_etypes) else None


class _CompressingSampler(_DGLSampler):
    """Runs the user's sampler in a worker, then has the batch producer read and encode the features it
    marked lazy.

    `sources` maps (node type, name) to (table name, FeatureSource) for node features read from a
    source of the loader's (stores, zero-copy, caches; pipeline.sources); every other feature is
    read from the graph's own column (``g.nodes[t].data``, ``g.edges[t].data``). Columns lazily
    sliced from the parent graph's features are detached from their storage (sent as their row
    index), on every node and edge frame. In a DataLoader worker, the batch is written into a slot
    of `ring` (pipeline.transport; made here, in the main process, before the workers start), so
    the hand-over copies nothing.
    """

    def __init__(self, sampler, codecs: dict[GroupKey, Codec], sources: Mapping[tuple, tuple],
                 check_seeds: Optional[bool] = None):
        super().__init__()
        self.sampler = sampler
        self.codecs = codecs
        self.sources = dict(sources)
        self.ring = SlotRing()
        self.check_seeds = check_seeds  # edge_wise: each batch's seeds checked as ids (None: not checked)

    def sample(self, g, indices):
        if self.check_seeds is not None:  # a batch of an indices dataset (the loader could not check them)
            _check_seeds(g, _batch_ids(indices), self.check_seeds, argname="a batch of the indices dataset",
                         own=_dgls_own(self.sampler))
        t0 = time.perf_counter()
        out = self.sampler.sample(g, indices)
        t1 = time.perf_counter()
        plan, slots, detached, from_graph = BatchPlan(), [], [], []
        for i, (where, sub) in enumerate(_graphs(out)):
            for kind, side, type_ in _sides(sub):
                slot = _Slot(i, side, type_, "", where)
                slots.extend(self._take(g, sub, slot, kind, plan, from_graph))
                ptype = _parent_type(g, kind, type_)
                if ptype is not None:
                    parent = _columns(g, NODES if kind == NODE else EDGES, ptype)
                    detached.extend(_Detached(replace(slot, key=key), ptype)
                                    for key in _detach(_columns(sub, side, type_), parent))
        batch = produce(plan, self.codecs, OutputBuffers.for_this_process(self.ring),
                        meta=_Meta(tuple(slots), tuple(detached), tuple(from_graph)), seconds={"sample": t1 - t0})
        return out, _Encoded(batch)  # the result as it is: DGL's loader moves it, then _with_graphs takes it

    def _take(self, g, sub, where: _Slot, kind: str, plan: BatchPlan, from_graph: list) -> list[_Slot]:
        """Plan the rows of the LazyFeature columns of one of `sub`'s frames; their slots, in frame order
        (those read from the graph's own columns also into `from_graph`).
        Each column is replaced by an empty placeholder (DGL's prefetcher must not fetch it again,
        uncompressed), so that the decoded rows take its place in the frame's column order."""
        view = where.view(sub)
        id_name = dgl.NID if kind == NODE else dgl.EID
        taken = []
        for key, column in list(_columns(sub, where.side, where.type_).items()):
            if not isinstance(column, LazyFeature):
                continue
            ids = column.id_ if column.id_ is not None else view[id_name] if id_name in view.keys() else None
            if ids is None:  # DGL's prefetcher refuses it alike
                raise ValueError(f"LazyFeature {key!r} on a sampled graph has no ids, and the graph has no "
                                 f"{id_name} column; give LazyFeature(name, id_) or keep {id_name}")
            parent_key = column.name or key
            store, source = self.sources.get((where.type_, parent_key), (None, None)) if kind == NODE else (None, None)
            slot = replace(where, key=key)
            if source is None:
                parent = g.nodes[where.type_].data if kind == NODE else g.edges[where.type_].data
                source = parent[parent_key]
                from_graph.append(_FromGraph(slot, kind, parent_key, column.id_))
            plan.gather(slot.name, source, ids, store=store)
            view[key] = torch.empty((int(ids.numel()), 0), dtype=torch.uint8)
            taken.append(slot)
        return taken


def _detach(columns: dict, parent_columns: dict) -> list[str]:
    """Drop the storage of the `columns` that are lazy slices of the parent's (DGL's
    remove_parent_storage_columns pairs a sampled graph's frames with the parent's by position, so a
    block's destination and edge frames would keep the parent's whole tensors and pickle them from
    every worker; DGL has no public API for a column's storage); the keys detached."""
    keys = []
    for key, column in columns.items():
        if isinstance(column, LazyFeature) or getattr(column, "storage", None) is None:
            continue
        parent = parent_columns.get(key)
        if parent is not None and not isinstance(parent, LazyFeature) and parent.storage is column.storage:
            column.storage = None
            keys.append(key)
    return keys


class CompressedDGLDataLoader(_DGLDataLoader, _common.Codecs):
    """Drop-in for dgl.dataloading.DataLoader that sends the sampler's prefetched features compressed.

    Arguments up to `gpu_cache` are DGL's DataLoader's, in its order; remaining keyword arguments go to it
    (`num_workers`, `persistent_workers`, ...). With the same seeds (``numpy``, ``torch``, ``dgl.seed``) it
    yields DGL's (input_nodes, output_nodes, blocks), bit for bit; given edge ids (``{etype: ids}`` on a
    heterogeneous graph) and an edge-wise sampler (``dgl.dataloading.as_edge_prediction_sampler``, with or
    without a ``negative_sampler``, any ``exclude``), DGL's (input_nodes, pair_graph, neg_pair_graph,
    blocks), or (input_nodes, pair_graph, blocks) without negatives; a subgraph sampler's one graph
    (``ClusterGCNSampler``, ``SAINTSampler``: their indices are partition ids or batch numbers, as DGL reads
    them); a custom sampler's own structure (tuples, lists, dicts: its graphs' LazyFeature columns compressed,
    a LazyFeature outside a graph fetched by DGL's prefetcher from ``attach_data``'s data, uncompressed).
    `indices` DGL cannot make a tensor of is iterated as DGL iterates it (a dataset whose items are
    the batches), each batch's ids checked as it comes. The features loaded are the ones the
    sampler names, as for DGL (``NeighborSampler(fanouts, prefetch_node_feats=[...], prefetch_labels=[...])``,
    per type on a heterogeneous graph: ``{"paper": ["feat"]}``; an edge-wise sampler's node-wise one's, and
    its own ``prefetch_labels``, edge columns of the pair graph; a subgraph sampler's ``prefetch_ndata`` /
    ``prefetch_edata``), grouped by dtype and row shape across types, one codec per group. The sampler's
    ``output_device`` must be None or the CPU (the workers sample on the CPU; `device` is where batches go).
    Ours: `codec` (``"auto"``, the default: per group the smallest of IBP and
    EBP, or identity when neither gains; ``"ibp"``, ``"ebp"``, ``"identity"`` or a fitted codec object),
    `prefetch` (batches decoded ahead on a CUDA device), `node_stores` (node features served from
    pre-encoded tables, ``{"feat": EncodedTable}`` or ``{"paper": {"feat": EncodedTable}}``, instead of
    the graph's tensors, which then need not hold them: workers gather compressed rows, each table keeps
    its codec; or feature sources, e.g. a ShardedSource per table: one rank's shard, the other rows fetched
    compressed from their owners per batch, pipeline.sharded; every rank must then take the same number of
    batches, as ``use_ddp=True`` gives them), `features` and `device_cache` (as for
    CompressedNeighborLoader: pipeline.features, pipeline.cache; the cache's budget is shared equally by the
    node feature tables, a table of node type t holding t's nodes most often drawn as in-neighbours).

    Starting a loader makes numba's threading layer fork-safe unless the user chose one (ibp_graph.threads)
    and compiles each codec's kernels once here (a warm-up encode, and with workers a row of each prefetched
    table gathered and encoded with their kernels: pipeline.producer.warm_gathers), so that forked workers
    inherit them and compile nothing.
    """

    def __init__(
        self,
        graph: "dgl.DGLGraph",
        indices: Union[torch.Tensor, Mapping[str, torch.Tensor]],
        graph_sampler: Any,
        device: Union[str, torch.device, None] = None,
        use_ddp: bool = False,
        ddp_seed: int = 0,
        batch_size: int = 1,
        drop_last: bool = False,
        shuffle: bool = False,
        use_prefetch_thread: Optional[bool] = None,
        use_alternate_streams: Optional[bool] = None,
        pin_prefetcher: Optional[bool] = None,
        use_uva: bool = False,
        gpu_cache: Optional[dict] = None,
        *,
        codec: CodecSpec = "auto",
        prefetch: int = 2,
        node_stores: Optional[Mapping[str, Any]] = None,
        features: str = "auto",
        device_cache: Union[int, float] = 0,
        **kwargs: Any,
    ):
        _common.start()
        if use_uva:
            raise NotImplementedError("use_uva=True is not supported: CompressedDGLDataLoader samples, "
                                      "fetches and encodes in CPU workers; use use_uva=False")
        if gpu_cache is not None:
            raise NotImplementedError(f"gpu_cache={gpu_cache!r} is not supported: decoded features are "
                                      "not cached on the GPU; use gpu_cache=None")
        if "collate_fn" in kwargs:
            raise NotImplementedError("collate_fn= is not supported: the loader wraps graph_sampler.sample "
                                      "itself")
        if not isinstance(graph, dgl.DGLGraph):
            raise TypeError(f"graph must be a dgl.DGLGraph, got {type(graph).__name__}")
        if graph.device.type != "cpu":
            raise ValueError(f"graph is on {graph.device}; the loader samples and fetches features on the "
                             "CPU: pass graph.to('cpu') and device='cuda' for the output")
        if not callable(getattr(graph_sampler, "sample", None)):
            raise TypeError(f"graph_sampler must be a dgl.dataloading sampler (with .sample), got "
                            f"{type(graph_sampler).__name__}")
        edge_wise = isinstance(graph_sampler, dgl.dataloading.EdgePredictionSampler)
        batch_size = _batch_size(batch_size)
        check_batch_size(batch_size)
        _check_output_device(graph_sampler, edge_wise)
        _check_graph(graph)
        seeds = _tensorized(indices)
        by_id = isinstance(graph_sampler, _ID_SEEDED)
        if by_id and seeds is not None:
            _check_seeds(graph, seeds, edge_wise, own=_dgls_own(graph_sampler))
            _check_idtype(graph, seeds, graph_sampler, edge_wise)
        if edge_wise:
            _check_edge_sampler(graph, graph_sampler, seeds)
        stores = _node_stores(graph, node_stores)
        node_attrs, edge_attrs, typed = _features(graph, graph_sampler, stores)
        out_device = _common.loader_device(device) if device is not None else torch.device("cpu")  # DGL's default
        self.features = plan_features(node_attrs, features=features, device_cache=device_cache, device=out_device,
                                      codec=codec, hotness=_type_hotness(graph, typed),
                                      origin=functools.partial(_column_origin, graph, {q: k for k, q in typed.items()}))
        node_attrs = {**node_attrs, **self.features.node_attrs}
        self._codecs: dict[GroupKey, Codec] = _common.setup_codecs(
            codec_tables(node_attrs), edge_attrs,
            num_nodes=max(graph.num_nodes(t) for t in graph.ntypes),
            num_edges=max([graph.num_edges(t) for t in graph.canonical_etypes] or [0]), codec=codec,
            device=out_device)
        # its ring (pipeline.transport) is made here, before the workers start
        self._compressing = _CompressingSampler(graph_sampler, self._codecs, _sources(graph, typed, node_attrs),
                                                check_seeds=edge_wise if by_id and seeds is None else None)
        super().__init__(graph, indices, self._compressing,
                         device=device, use_ddp=use_ddp, ddp_seed=ddp_seed, batch_size=batch_size,
                         drop_last=drop_last, shuffle=shuffle, use_prefetch_thread=use_prefetch_thread,
                         use_alternate_streams=use_alternate_streams, pin_prefetcher=pin_prefetcher,
                         use_uva=False, gpu_cache=None, **kwargs)
        self.graph_sampler = graph_sampler  # the user's; the wrapper lives in collate_fn
        if self.num_workers > 0:  # every gather and encode kernel they run, compiled here (workers inherit them)
            warm_gathers({**node_attrs, **edge_attrs}, self._codecs, graph.idtype)
        self._forked: Optional[_Forked] = None
        self._warned: set = set()  # the columns a batch read again here (warned once each)
        self._stage, self.stats = _common.decode_stage(self._codecs, self.device, prefetch, self.features)
        if not node_attrs and not edge_attrs:  # e.g. DGL's entity_sample.py: the script reads g.ndata itself
            self.stats.note = (f"graph_sampler ({type(graph_sampler).__name__}) prefetches no features: only the "
                               "batches' id columns travel compressed; the batches are DGL's own")

    def _get_iterator(self):
        # the graph's columns as the workers about to start will hold them (workers=0: read live, as DGL)
        self._forked = _Forked(self.graph) if self.num_workers > 0 else None
        it = self._compressing.ring.start(super()._get_iterator)  # torch's iterator, which DGL's wraps
        _common.shut_down_with(self, it)
        return it

    def __iter__(self) -> Iterator[tuple]:
        it = super().__iter__()
        batches = _common.name_worker_deaths(it, "CompressedDGLDataLoader", "sampling, fetching or encoding",
                                             lambda: _common.worker_processes(it))
        for decoded in self._stage(_with_graphs(batches)):
            yield _fill(decoded, self.graph, self._forked, self._warned)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(sampler={type(self.graph_sampler).__name__}, batches={len(self)}, "
                f"codecs={ {k: c.name for k, c in self.codecs.items()} }, device={self.device}, "
                f"features={self.features.describe()})")


def _with_graphs(batches: Iterator[tuple]) -> Iterator[EncodedBatch]:
    """DGL's (sampled, _Encoded) -> the EncodedBatch, the sampler's result riding in its meta."""
    for sampled, enc in batches:
        yield replace(enc.batch, meta=replace(enc.batch.meta, sampled=sampled))


class _Forked:
    """The parent graph's columns as workers started with them: each tensor (weakly) and its version counter.

    DGL's loader reads a batch's prefetched features from the graph in the main process as the batch is
    taken; this one's workers read them from the copy of the graph they started with. A column replaced
    or written in place since (torch's in-place ops count; writes through a numpy view of it do not)
    would reach the batches as it was: `changed` tells, so the batch reads it here instead. (Restarting
    persistent workers would restore compression but not DGL's batches: new workers draw new seeds.)"""

    def __init__(self, graph):
        self.columns = {(NODE, t, k): (weakref.ref(v), v._version)
                        for t in graph.ntypes for k, v in graph.nodes[t].data.items()}
        self.columns.update({(EDGE, et, k): (weakref.ref(v), v._version)
                             for et in graph.canonical_etypes for k, v in graph.edges[et].data.items()})

    def changed(self, kind: str, type_, key: str, live: torch.Tensor) -> bool:
        ref, version = self.columns.get((kind, type_, key), (lambda: None, None))
        return ref() is not live or live._version != version


def _column_origin(graph, typed: Mapping[str, tuple], name: str, tensor: torch.Tensor) -> Origin:
    """plan_features' Origin of node table `name` (`typed`: its (node type, column)), encoded from the graph's
    column `tensor`: batches follow that column as DGL's prefetcher reads it, written in place or replaced (a
    tensor of node_stores' own, in a TensorSource, is followed as it is)."""
    t, key = typed[name]
    if graph.nodes[t].data.get(key) is not tensor:
        return Origin(tensor, f"node_stores' table for {t!r}/{key!r}")
    where = f"graph.nodes[{t!r}].data[{key!r}]"

    def current() -> torch.Tensor:
        data = graph.nodes[t].data
        if key not in data:
            raise KeyError(f"{where}, which the sampler prefetches, was removed from the graph after the loader "
                           "was built (DGL's loader reads it as each batch is taken)")
        return data[key]
    return Origin(tensor, where, current=current)


def _fill(decoded: DecodedBatch, parent, forked: Optional[_Forked], warned: set) -> Any:
    """DGL's batch (the sampler's result, _graphs: (input_nodes, output_nodes, blocks), (input_nodes, pair_graph,
    [neg_pair_graph,] blocks), or one subgraph): the decoded features put where DGL's prefetcher puts them (in
    place of their placeholders, through DGL's views), the detached columns re-attached to `parent`'s
    storage (a column `parent` no longer has stays without, as DGL leaves it). A feature the workers read from
    a column of `parent` that changed since they started (`forked`) is read again from `parent` now, as
    DGL's prefetcher reads it (uncompressed; warned once per column, recorded in `warned`)."""
    meta: _Meta = decoded.meta
    graphs = [g for _, g in _graphs(meta.sampled)]
    for s in meta.slots:
        s.view(graphs[s.graph])[s.key] = decoded[s.name]
    for f in meta.from_graph if forked is not None else ():
        s = f.slot
        frame = parent.nodes[s.type_].data if f.kind == NODE else parent.edges[s.type_].data
        where = f"graph.{'nodes' if f.kind == NODE else 'edges'}[{s.type_!r}].data[{f.key!r}]"
        if f.key not in frame.keys():
            raise KeyError(f"{where}, which the sampler prefetches, was removed from the graph after the "
                           "loader's workers started (DGL's loader reads it as each batch is taken)")
        live = frame[f.key]
        if forked.changed(f.kind, s.type_, f.key, live):
            view = s.view(graphs[s.graph])
            ids = f.ids if f.ids is not None else view[dgl.NID if f.kind == NODE else dgl.EID]
            view[s.key] = live[ids.to(live.device)].to(view[s.key].device)
            if where not in warned:
                warned.add(where)
                warnings.warn(f"{where} changed after the loader's workers started (replaced, or written in "
                              "place); they read the copy they started with, so batches read its rows here, from "
                              "the graph as it is now, as DGL's loader does (uncompressed, in this process). "
                              "Persistent workers keep their copy; other workers start each epoch with the graph "
                              "as it is, so changes between epochs stay compressed with persistent_workers=False",
                              stacklevel=3)
    for d in meta.detached:  # no public API for a column's storage (see _detach)
        s = d.slot
        own = _columns(parent, NODES if s.side != EDGES else EDGES, d.parent_type).get(s.key)
        if own is not None:
            _columns(graphs[s.graph], s.side, s.type_)[s.key].storage = own.storage
    return meta.sampled


def _sources(graph, typed: Mapping[tuple, str], attrs: Mapping[str, Any]) -> dict:
    """{(node type, name): (table name, FeatureSource)} of the node features read from a source (a store,
    zero-copy, a cache, a source object given); features read from the graph's own columns are left out
    (the workers read those columns as the sampler finds them)."""
    out = {}
    for (t, n), q in typed.items():
        table = attrs[q]
        own = graph.nodes[t].data[n] if n in graph.nodes[t].data.keys() else None
        if not (isinstance(table, TensorSource) and table.tensor is own) and table is not own:
            out[(t, n)] = (q, as_source(table))
    return out


def _type_hotness(graph, typed: Mapping[tuple, str]) -> Callable[[str], np.ndarray]:
    """plan_features' hotness of the node tables (`typed`: (node type, name) -> table name): a table of node type
    t ranks t's nodes by how often the sampler can draw them as in-neighbours, i.e. their appearances as the
    source of every edge type leaving t, counted once per type, when first asked for."""
    type_of = {q: t for (t, _), q in typed.items()}
    counts = functools.lru_cache(maxsize=None)(functools.partial(_source_counts, graph))
    return lambda name: counts(type_of[name])


def _source_ids(graph, ntype) -> np.ndarray:
    """The source ids of every edge leaving `ntype`, over its edge types (a graph with one node type: its
    CSC neighbour lists, which pipeline.features ranks by; graph.edges() takes only a graph with one edge
    type, and DGL's homogeneous graphs may have several)."""
    ids = [graph.edges(etype=et)[0].numpy() for et in graph.canonical_etypes if et[0] == ntype]
    return np.concatenate(ids) if ids else np.zeros(0, np.int64)


def _source_counts(graph, ntype) -> np.ndarray:
    """Each node of `ntype`'s appearances as an edge source, over the edge types leaving `ntype`."""
    return degree_hotness(_source_ids(graph, ntype), graph.num_nodes(ntype))


def _qualified(type_, key: str, single: bool) -> str:
    """A feature's name among all types' ("feat" on a graph with one type, "paper/feat" otherwise)."""
    if single:
        return key
    return f"{':'.join(type_) if isinstance(type_, tuple) else type_}/{key}"


def _node_type(graph, ntype: Any, argname: str) -> str:
    if ntype not in graph.ntypes:
        raise KeyError(f"{argname} names node type {ntype!r}; the graph has node types {graph.ntypes}")
    return ntype


def _edge_type(graph, etype: Any, argname: str) -> tuple:
    try:
        return graph.to_canonical_etype(etype)
    except Exception as e:  # DGLError: unknown or ambiguous
        raise KeyError(f"{argname} names edge type {etype!r}, which is not one edge type of the graph: "
                       f"use one of {graph.canonical_etypes} (or its unique relation name)") from e


def _per_type(graph, value: Any, argname: str, kind: str) -> dict:
    """{type: [names]} of a sampler's prefetch attribute: a list (graphs with one type of `kind`) or a
    dict per type, as DGL's BlockSampler takes it."""
    types = graph.ntypes if kind == NODE else graph.canonical_etypes
    if not value:
        return {}
    if isinstance(value, Mapping):
        out: dict = {}
        for t, names in value.items():
            _names(names, f"{argname}[{t!r}]")
            t = _node_type(graph, t, argname) if kind == NODE else _edge_type(graph, t, argname)
            out.setdefault(t, []).extend(names)
        return out
    names = _names(value, argname)
    if len(types) != 1:
        example = {t: names for t in types[:1]}
        raise ValueError(f"{argname}={value!r} is a list, but the graph has {len(types)} {kind} types "
                         f"({types}); DGL takes a list only for a graph with one {kind} type: name the "
                         f"types, e.g. {argname}={example!r}")
    return {types[0]: names}


def _names(value: Any, argname: str) -> list:
    """A prefetch attribute's names as DGL reads them (it iterates the value); a string of several characters is
    refused: DGL would prefetch one column per character ('feat': 'f', 'e', 'a', 't')."""
    if isinstance(value, str) and len(value) > 1:
        raise TypeError(f"{argname}={value!r} is a string; DGL reads it as the names {list(value)!r}, one per "
                        f"character: give a list, {argname}={[value]!r}")
    return list(value)


def _node_stores(graph, node_stores: Optional[Mapping]) -> dict:
    """{(ntype, name): EncodedTable or FeatureSource} from `node_stores` ({name: table}, or
    {ntype: {name: table}})."""
    if node_stores is None:
        return {}
    if not isinstance(node_stores, Mapping):
        raise TypeError(f"node_stores must be a dict of EncodedTables or feature sources ({{'feat': table}}, or "
                        f"{{'paper': {{'feat': table}}}} per node type), got {type(node_stores).__name__}")
    out = {}
    for k, v in node_stores.items():
        if isinstance(v, Mapping):
            ntype = _node_type(graph, k, "node_stores")
            items = [(ntype, name, table) for name, table in v.items()]
        elif len(graph.ntypes) == 1:
            items = [(graph.ntypes[0], k, v)]
        else:
            raise ValueError(f"node_stores[{k!r}] is not a dict per node type, but the graph has node types "
                             f"{graph.ntypes}: use node_stores={{ntype: {{name: EncodedTable}}}}")
        for ntype, name, table in items:
            where = f"node_stores[{name!r}]" if len(graph.ntypes) == 1 else f"node_stores[{ntype!r}][{name!r}]"
            _common.host_table(table, where, graph.num_nodes(ntype), accepted=(EncodedTable, FeatureSource),
                               what="an EncodedTable (ibp_graph.data.store) or a FeatureSource "
                                    "(ibp_graph.pipeline.sources)")
            out[(ntype, name)] = table
    return out


def _check_graph(graph) -> None:
    """Every stored format of every edge type of `graph`, checked once before DGL samples it: DGL trusts
    them, and a negative or too large node id, a decreasing indptr or repeated edge ids crash its
    samplers (SIGSEGV), as our own CSC is checked on the PyG path."""
    formats = graph.formats()["created"]
    for etype in graph.canonical_etypes:
        src_t, _, dst_t = etype
        n_src, n_dst, n_edges = graph.num_nodes(src_t), graph.num_nodes(dst_t), graph.num_edges(etype)
        where = "graph" if len(graph.canonical_etypes) == 1 else f"graph's edge type {etype}"
        for fmt in formats:
            arrays = [a.numpy() for a in graph.adj_tensors(fmt, etype)]
            if fmt == "coo":
                named = [("its source ids", arrays[0], n_src), ("its destination ids", arrays[1], n_dst)]
            else:
                rows, cols = (n_src, n_dst) if fmt == "csr" else (n_dst, n_src)
                indptr, indices, eids = arrays
                if indptr.shape != (rows + 1,) or (rows + 1 and (int(indptr[0]) != 0 or int(indptr[-1]) != n_edges)):
                    raise ValueError(f"{where}: its {fmt} indptr has shape {indptr.shape}, from "
                                     f"{int(indptr[0]) if indptr.size else None} to "
                                     f"{int(indptr[-1]) if indptr.size else None}; accepted: {rows + 1} entries "
                                     f"from 0 to the {n_edges} edges (DGL does not check: its samplers would crash)")
                bad = first_bad_step(indptr)
                if bad >= 0:
                    raise ValueError(f"{where}: its {fmt} indptr decreases at {bad} ({int(indptr[bad])} -> "
                                     f"{int(indptr[bad + 1])}); accepted: non-decreasing offsets (DGL does not check)")
                named = [(f"its {fmt} indices", indices, cols)]
                if eids.size:
                    named.append((f"its {fmt} edge ids", eids, n_edges))
                    bad = first_repeat(eids, n_edges) if first_outside(eids, 0, n_edges) < 0 else -1
                    if bad >= 0:
                        raise ValueError(f"{where}: its {fmt} edge ids repeat {int(eids[bad])} at {bad}; accepted: "
                                         f"every edge id in [0, {n_edges}) once (DGL does not check: it would crash)")
            for what, ids, n in named:
                bad = first_outside(ids, 0, n)
                if bad >= 0:
                    raise ValueError(f"{where}: {what} must be in [0, {n}); [{bad}] is {int(ids[bad])} (DGL does "
                                     "not check: its samplers would crash)")


#: DGL's samplers whose indices are node ids (node-wise) or, wrapped by as_edge_prediction_sampler, edge ids:
#: the loader checks those before DGL samples; other samplers' indices mean what their sample() makes of them
#: (ClusterGCNSampler: partition ids, SAINTSampler: batch numbers), as in DGL
_ID_SEEDED = (dgl.dataloading.BlockSampler, dgl.dataloading.ShaDowKHopSampler, dgl.dataloading.EdgePredictionSampler)


def _batch_size(value: Any) -> Any:
    """DGL's DataLoader takes any integer batch_size (it only counts and slices with it): a numpy integer or a 0-d
    integer tensor as a Python int, for check_batch_size; anything else as given (bool stays refused)."""
    if isinstance(value, np.integer) or (torch.is_tensor(value) and value.dim() == 0 and value.dtype != torch.bool
                                         and not value.dtype.is_floating_point and not value.is_complex()):
        return int(value)
    return value


def _tensorized(indices: Any) -> Any:
    """`indices` as DGL's DataLoader reads them: a tensor or a dict of tensors (other values converted with
    torch.tensor, as DGL converts them), or None for what DGL iterates as a dataset of its own (its items are
    the batches)."""
    try:
        if isinstance(indices, Mapping):
            return {k: v if torch.is_tensor(v) else torch.tensor(v) for k, v in indices.items()}
        return indices if torch.is_tensor(indices) else torch.tensor(indices)
    except Exception:  # DGL's DataLoader catches anything here alike
        return None


def _batch_ids(batch: Any) -> Any:
    """An indices dataset's batch as _check_seeds reads it: a single id is a batch of one (DGL's samplers
    take it so)."""
    if isinstance(batch, Mapping):
        return {k: _batch_ids(v) for k, v in batch.items()}
    ids = torch.as_tensor(batch)
    return ids.reshape(1) if ids.dim() == 0 else ids


def _check_output_device(sampler, edge_wise: bool) -> None:
    """The sampler's `output_device`: None or the CPU (the workers sample, gather and encode on the CPU)."""
    named = [("graph_sampler", sampler)] + ([("graph_sampler.sampler", sampler.sampler)] if edge_wise else [])
    for argname, s in named:
        value = getattr(s, "output_device", None)
        if value is not None and torch.device(value).type != "cpu":
            raise NotImplementedError(
                f"{argname}.output_device={value!r} is not supported: CompressedDGLDataLoader samples and gathers "
                f"on the CPU (in its workers) and decodes on `device`; accepted: output_device=None or 'cpu', "
                f"with device={str(value)!r} given to the loader for the batches")


def _check_seeds(graph, indices, edge_wise: bool, argname: str = "indices", own: bool = True) -> None:
    """The seeds' ids on the CPU and in range, per type (DGL's samplers would read out of bounds): node ids, or
    an edge-wise sampler's edge ids ({etype: ids}, the relation name or the canonical triple, as DGL takes them;
    a tensor only for a graph with one node type, or edge type: DGL's own samplers (`own`, _dgls_own) fail on
    every batch of one elsewhere; a sampler of the user's may read it as it likes, so it is not checked)."""
    what, types = ("edge", graph.canonical_etypes) if edge_wise else ("node", graph.ntypes)
    if isinstance(indices, Mapping):
        per_type = {(_edge_type if edge_wise else _node_type)(graph, t, argname): (f"{argname}[{t!r}]", ids)
                    for t, ids in indices.items()}
    elif len(types) != 1 and not own:
        return
    elif len(types) != 1 and torch.as_tensor(indices).numel():  # empty: DGL takes it (no batch to sample)
        sampler = "an edge-wise sampler" if edge_wise else "DGL's samplers"
        raise ValueError(f"{argname} is a tensor of {what} ids, but the graph has {len(types)} {what} types "
                         f"({types}); {sampler} take{'s' if edge_wise else ''} {{{what} type: {what} ids}} there, "
                         f"e.g. {argname}={{" + f"{types[0]!r}: ids" + "}")
    else:
        per_type = {types[0]: (argname, indices)}
    for t, (name, ids) in per_type.items():
        if np.ndim(ids) == 1 and len(ids) == 0:  # no id to check: DGL takes an empty list (a float tensor) alike
            continue
        ids = _id_tensor(ids, name, f"{what} ids")
        if ids.device.type != "cpu":  # DGL: "Expect graph and indices to be on the same device"
            raise ValueError(f"{name} is on {ids.device}; the loader samples on the CPU (use_uva is not supported): "
                             "accepted: indices on the CPU")
        n = graph.num_edges(t) if edge_wise else graph.num_nodes(t)
        _check_in_range(ids, n, name, what)


def _dgls_own(sampler) -> bool:
    """Whether `sampler` samples with DGL's own code (its sample / sample_blocks not overridden outside dgl): then
    it reads the seeds as DGL's samplers do (sample_neighbors, edge_subgraph, ...: ids of the graph's idtype)."""
    return all((getattr(getattr(type(sampler), m), "__module__", None) or "").startswith("dgl.")
               for m in ("sample", "sample_blocks") if hasattr(type(sampler), m))


def _check_idtype(graph, seeds: Any, sampler, edge_wise: bool) -> None:
    """The seeds' dtype is the graph's idtype (int32 or int64), for DGL's own samplers: DGL refuses every batch
    otherwise, in its workers ("Expect argument ... to have data type"). DGL batches a dict's ids in the dtype of
    its first value (one id tensor for all types), so that is the dtype checked; no seeds, no batch to refuse."""
    if not _dgls_own(sampler):  # edge-wise: EdgePredictionSampler.sample's edge_subgraph, whatever it wraps
        return
    if isinstance(seeds, Mapping):
        if not sum(int(torch.as_tensor(v).numel()) for v in seeds.values()):
            return
        key, first = next(iter(seeds.items()))
        dtype = torch.as_tensor(first).dtype
        name = f"indices[{key!r}] (DGL batches a dict's ids in the dtype of its first value)"
    else:
        if not torch.as_tensor(seeds).numel():
            return
        dtype, name = torch.as_tensor(seeds).dtype, "indices"
    if dtype != graph.idtype:
        cast = "long" if graph.idtype == torch.int64 else "int"
        other = {torch.int32: ", or graph.int()", torch.int64: ", or graph.long()"}.get(dtype, "")
        raise TypeError(f"{name} is {dtype}, but the graph's idtype is {graph.idtype}: DGL's samplers take "
                        f"{'edge' if edge_wise else 'node'} ids of the graph's idtype (they would refuse every batch); "
                        f"use indices.{cast}(){' for each value' if isinstance(seeds, Mapping) else ''}{other}")


def _id_tensor(value: Any, argname: str, what: str) -> torch.Tensor:
    """`value` as a 1-d integer tensor (TypeError naming `argname` otherwise)."""
    ids = torch.as_tensor(value)
    if ids.dtype == torch.bool or ids.dtype.is_floating_point or ids.is_complex() or ids.dim() != 1:
        raise TypeError(f"{argname} must be a 1-d tensor of {what}, got {ids.dtype} {tuple(ids.shape)}")
    return ids


def _check_in_range(ids: torch.Tensor, n: int, argname: str, what: str) -> None:
    bad = first_outside(ids.numpy(), 0, n)
    if bad >= 0:
        raise IndexError(f"{argname} contains {what} {int(ids[bad])} at position {bad}, outside [0, {n})")


#: what dgl.dataloading.as_edge_prediction_sampler's `exclude` takes (and tensors, callables)
EXCLUDE = (None, "self", "reverse_id", "reverse_types")


def _check_edge_sampler(graph, sampler, indices) -> None:
    """The arguments of an edge-wise sampler (as_edge_prediction_sampler) that DGL reads only in the
    workers, per batch: its negative sampler, `exclude` and the reverse edges it names. `indices` None: an
    indices dataset, whose batches' form (edge ids, or a dict per edge type) shows only as they come; the
    reverse edges are then checked in the form given."""
    neg = sampler.negative_sampler
    if neg is not None and not callable(neg):
        raise TypeError(f"graph_sampler.negative_sampler={neg!r} is not callable; accepted: None or a callable "
                        "(g, eids) -> (src, dst), e.g. dgl.dataloading.negative_sampler.Uniform(5)")
    exclude = sampler.exclude
    typed = isinstance(indices if indices is not None else sampler.reverse_eids, Mapping)
    if callable(exclude) or torch.is_tensor(exclude) or (
            isinstance(exclude, Mapping) and all(torch.is_tensor(v) for v in exclude.values())):
        return
    if not isinstance(exclude, (str, type(None))) or exclude not in EXCLUDE:
        raise ValueError(f"graph_sampler.exclude={exclude!r} is not accepted; use one of {EXCLUDE}, a callable "
                         "(seed edges) -> edge ids to exclude, or edge ids (a tensor, or a dict per edge type)")
    if exclude == "reverse_id":
        rev = sampler.reverse_eids
        if typed != isinstance(rev, Mapping) or rev is None:
            raise TypeError(f"graph_sampler.reverse_eids is {type(rev).__name__}; with exclude='reverse_id' and "
                            + ("indices per edge type, DGL needs {canonical edge type: reverse edge ids}"
                               if typed else "one tensor of edge ids, DGL needs one tensor: edge i's reverse id"))
        per_type = ({graph.canonical_etypes[0]: rev} if not typed else rev)
        seed_types = indices if typed and indices is not None else per_type
        for t in [_edge_type(graph, t, "indices" if seed_types is indices else "graph_sampler.reverse_eids")
                  for t in seed_types]:
            if t not in per_type:  # DGL looks reverse_eids up by the canonical type of the seeds
                raise KeyError(f"graph_sampler.reverse_eids has no entry for edge type {t!r} of indices; its keys "
                               f"are {list(per_type)}: DGL looks them up by the canonical edge type")
            argname = f"graph_sampler.reverse_eids[{t!r}]" if typed else "graph_sampler.reverse_eids"
            if not torch.is_tensor(per_type[t]):  # DGL gathers from it with torch.index_select, in the workers
                raise TypeError(f"{argname} is {type(per_type[t]).__name__}; accepted: a torch tensor of edge "
                                "ids (DGL reads it with torch.index_select)")
            ids, n = _id_tensor(per_type[t], argname, "edge ids"), graph.num_edges(t)
            if ids.numel() != n:
                raise ValueError(f"{argname} has {ids.numel()} entries; accepted: one reverse edge id per edge "
                                 f"({n})")
            _check_in_range(ids, n, argname, "edge id")
    elif exclude == "reverse_types":
        rev = sampler.reverse_etypes
        if not isinstance(rev, Mapping) or not isinstance(indices, (Mapping, type(None))):
            raise TypeError("exclude='reverse_types' takes indices per edge type and graph_sampler.reverse_etypes "
                            f"{{edge type: its reverse edge type}}; got indices {type(indices).__name__} and "
                            f"reverse_etypes {type(rev).__name__}")
        for k, v in rev.items():
            _edge_type(graph, k, "graph_sampler.reverse_etypes")
            _edge_type(graph, v, f"graph_sampler.reverse_etypes[{k!r}]")


#: the sampler attributes naming what it marks lazy: a BlockSampler's (ShaDowKHopSampler's) node features,
#: labels (nodes of the last block) and edge features; a subgraph sampler's (ClusterGCNSampler, SAINTSampler)
_PREFETCH = (("prefetch_node_feats", NODE), ("prefetch_labels", NODE), ("prefetch_edge_feats", EDGE),
             ("prefetch_ndata", NODE), ("prefetch_edata", EDGE))


def _prefetched(sampler, prefix: str = "graph_sampler") -> list[tuple[str, Any, str]]:
    """(argument name, value, NODE or EDGE) of what `sampler` marks lazy (_PREFETCH); an edge-wise sampler's
    are its node-wise sampler's plus its own prefetch_labels (edges of the pair graph)."""
    if isinstance(sampler, dgl.dataloading.EdgePredictionSampler):
        return (_prefetched(sampler.sampler, f"{prefix}.sampler")
                + [(f"{prefix}.prefetch_labels", sampler.prefetch_labels, EDGE)])
    return [(f"{prefix}.{arg}", getattr(sampler, arg, None), kind) for arg, kind in _PREFETCH]


def _features(graph, sampler, stores: Mapping) -> tuple[dict, dict, dict]:
    """The tables of the features the sampler prefetches (DGL's BlockSampler attributes): node tables
    and edge tables (by qualified name, for the codecs), and the qualified name of each node table by
    (type, name)."""
    wanted: dict = {NODE: {}, EDGE: {}}
    for argname, value, kind in _prefetched(sampler):
        for t, names in _per_type(graph, value, argname, kind).items():
            wanted[kind].setdefault(t, []).extend(names)
    unused = sorted(f"{t}/{n}" for t, n in stores if n not in wanted[NODE].get(t, []))
    if unused:
        raise ValueError(f"node_stores has {unused}, which graph_sampler does not prefetch (it prefetches "
                         f"{wanted[NODE]}); name them in prefetch_node_feats or prefetch_labels")
    tables, typed = {NODE: {}, EDGE: {}}, {}
    for kind, per_type in wanted.items():
        single = len(graph.ntypes if kind == NODE else graph.canonical_etypes) == 1
        for t, names in per_type.items():
            data, served = (graph.nodes if kind == NODE else graph.edges)[t].data, stores if kind == NODE else {}
            missing = [n for n in names if n not in data and (t, n) not in served]
            if missing:
                where = f"graph.{kind[0]}data" if single else f"graph.{kind}s[{t!r}].data"
                raise KeyError(f"graph_sampler prefetches {missing}, not in {where} (has {sorted(data.keys())})"
                               + (" nor in node_stores" if kind == NODE else ""))
            for n in dict.fromkeys(names):
                q = _qualified(t, n, single)
                table = served.get((t, n))
                if table is None:
                    table = _common.host_table(data[n], f"graph.{kind}s[{t!r}].data[{n!r}]")
                elif n in data and (data[n].dtype, tuple(data[n].shape)) != (table.dtype, tuple(table.shape)):
                    raise ValueError(f"node_stores' table for {q!r} holds {table.dtype} {tuple(table.shape)}; the "
                                     f"graph's column holds {data[n].dtype} {tuple(data[n].shape)}: encode that column")
                tables[kind][q] = table
                if kind == NODE:
                    typed[(t, n)] = q
    return tables[NODE], tables[EDGE], typed
