"""CompressedDGLDataLoader: DGL's DataLoader, with the prefetched features compressed on the way to `device`.

DGL's own loader runs the sampler in its worker processes and fetches the features the
sampler asked for (``prefetch_node_feats``, ``prefetch_labels``, ``prefetch_edge_feats``:
``LazyFeature`` columns on the returned graphs) in the main process. This loader *is*
DGL's loader (a subclass: same shuffling, same worker seeding, same batches) with one
stage moved and one added: workers take the ``LazyFeature`` columns off the sampled
graphs, fetch those rows from the graph's feature storages exactly as DGL would, and
encode them (``ibp_graph.pipeline``); the main process decodes them on `device` and puts
them where DGL would have: ``blocks[0].srcdata``, ``blocks[-1].dstdata``, ``block.edata``.

Needs dgl 2.1 (the newest Linux wheel in the package index), which loads only with
torch <= 2.2.1 and numpy < 2: ``make test-dgl`` builds such an environment (.venv-dgl).

DGL picks its backend when it is imported, from ``DGLBACKEND`` (else its config file).
Importing this module imports dgl with ``DGLBACKEND=pytorch`` unless the user set it,
and puts the environment back as it was; a dgl running another backend is refused.
A loader, when it starts, makes numba's threading layer fork-safe (ibp_graph.threads).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Any, Iterator, Optional, Union

import torch

from ibp_graph.codec.base import Codec
from ibp_graph.loaders import _common
from ibp_graph.pipeline.batch import DecodedBatch, EncodedBatch
from ibp_graph.pipeline.codec_setup import CodecSpec
from ibp_graph.pipeline.features import plan_features, worker_tensors
from ibp_graph.pipeline.grouping import GroupKey
from ibp_graph.pipeline.worker import encode_groups_counted

_INSTALL = ("pip install 'dgl==2.1.0' 'torch==2.2.1' 'numpy<2' 'torchdata==0.7.1' pandas pydantic "
            "(or `make venv-dgl`, which builds .venv-dgl)")


def _import_dgl():
    """dgl, imported with DGLBACKEND=pytorch unless the user set it; os.environ left as it was."""
    unset = "DGLBACKEND" not in os.environ
    if unset:
        os.environ["DGLBACKEND"] = "pytorch"
    try:
        import dgl
    finally:
        if unset:
            os.environ.pop("DGLBACKEND", None)
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


@dataclass(frozen=True)
class _Slot:
    """Where one fetched feature goes: graph `graph` of the batch, its `view`, column `key`."""

    name: str   # the tensor's name inside the EncodedBatch
    graph: int  # index into the batch's list of graphs (blocks)
    view: str   # "srcdata", "dstdata", "ndata" or "edata"
    key: str


@dataclass(frozen=True)
class _Meta:
    """The front-end's pass-through in an EncodedBatch: the slots (from the worker) and, once in
    the main process, the sampler's (input_nodes, output_nodes, blocks) that DGL moved to `device`."""

    slots: tuple[_Slot, ...]
    sampled: Optional[tuple] = None


class _Encoded:
    """One batch's compressed features inside DGL's pipeline (the 4th item of the sampler's tuple).

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


def _views(g) -> tuple[tuple[str, Any, str, str], ...]:
    """(view name, data view, id column, "node"/"edge") of a sampled graph, as DGL prefetches them."""
    if g.is_block:
        return (("srcdata", g.srcdata, dgl.NID, "node"), ("dstdata", g.dstdata, dgl.NID, "node"),
                ("edata", g.edata, dgl.EID, "edge"))
    return (("ndata", g.ndata, dgl.NID, "node"), ("edata", g.edata, dgl.EID, "edge"))


def _graphs(out: Any) -> list:
    """The sampled graphs of a sampler's (input_nodes, output_nodes, blocks-or-graph) result."""
    if not (isinstance(out, tuple) and len(out) == 3):
        raise TypeError(f"graph_sampler.sample returned {type(out).__name__}; CompressedDGLDataLoader "
                        "handles node-wise samplers returning (input_nodes, output_nodes, blocks)")
    graphs = out[2] if isinstance(out[2], (list, tuple)) else [out[2]]
    if not all(isinstance(g, dgl.DGLGraph) for g in graphs):
        raise TypeError("graph_sampler.sample returned (input_nodes, output_nodes, X) with X neither a "
                        f"DGLGraph nor a list of them ({[type(g).__name__ for g in graphs]})")
    return list(graphs)


class _CompressingSampler(_DGLSampler):
    """Runs the user's sampler in a worker, then fetches and encodes the features it marked lazy."""

    def __init__(self, sampler, codecs: dict[GroupKey, Codec], features=None):
        super().__init__()
        self.sampler = sampler
        self.codecs = codecs
        self.features = features  # pipeline.features.FeaturePlan: which rows the main process serves

    def sample(self, g, indices):
        t0 = time.perf_counter()
        out = self.sampler.sample(g, indices)
        t1 = time.perf_counter()
        graphs = _graphs(out)
        input_nodes, output_nodes, blocks = out
        tensors, slots = {}, []
        for i, sub in enumerate(graphs):
            for view_name, view, id_name, kind in _views(sub):
                for key in list(view.keys()):
                    lazy = view[key]
                    if not isinstance(lazy, LazyFeature):
                        continue
                    ids = lazy.id_ if lazy.id_ is not None else view[id_name]
                    storage = (g.get_node_storage(lazy.name or key, g.ntypes[0]) if kind == "node"
                               else g.get_edge_storage(lazy.name or key, g.canonical_etypes[0]))
                    name = f"{i}.{view_name}.{key}"
                    tensors.update(worker_tensors(self.features, name, (lazy.name or key) if kind == "node" else None,
                                                  ids, lambda i: storage.fetch(i, torch.device("cpu"))))
                    slots.append(_Slot(name, i, view_name, key))
                    del view[key]  # DGL's prefetcher must not fetch it again, uncompressed
        t2 = time.perf_counter()
        groups, layouts, copied = encode_groups_counted(tensors, self.codecs)
        copied += sum(t.numel() * t.element_size() for t in tensors.values())  # the feature gathers
        batch = EncodedBatch(groups=groups, layouts=layouts, meta=_Meta(tuple(slots)), copied_bytes=copied,
                             seconds={"sample": t1 - t0, "gather": t2 - t1, "encode": time.perf_counter() - t2})
        return input_nodes, output_nodes, blocks, _Encoded(batch)


class CompressedDGLDataLoader(_DGLDataLoader):
    """Drop-in for dgl.dataloading.DataLoader that sends the sampler's prefetched features compressed.

    Arguments up to `gpu_cache` are DGL's DataLoader's, in its order; `codec` (``"auto"``,
    the default: per group the smallest of IBP and EBP, or identity when neither gains;
    ``"ibp"``, ``"ebp"``, ``"identity"`` or a fitted codec object), `prefetch`
    (batches decoded ahead on a CUDA device), `features` and `device_cache` (as for
    CompressedNeighborLoader: pipeline.features, pipeline.cache) are ours. Features to load are the ones the sampler names, as for DGL:
    ``NeighborSampler(fanouts, prefetch_node_feats=[...], prefetch_labels=[...])``.
    Remaining keyword arguments go to DGL's DataLoader (`num_workers`, `persistent_workers`,
    ...). With the same seeds (``numpy``, ``torch``, ``dgl.seed``) it yields the same
    (input_nodes, output_nodes, blocks) as DGL's DataLoader, bit for bit.

    Starting a loader makes numba's threading layer fork-safe unless the user chose one
    (ibp_graph.threads) and compiles each codec's kernels once here (a warm-up encode),
    so that forked workers inherit them.
    """

    def __init__(
        self,
        graph: "dgl.DGLGraph",
        indices: torch.Tensor,
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
        if len(graph.ntypes) != 1 or len(graph.canonical_etypes) != 1:
            raise NotImplementedError(f"graph has node types {graph.ntypes} and edge types "
                                      f"{graph.canonical_etypes}; heterogeneous graphs are not supported")
        if graph.device.type != "cpu":
            raise ValueError(f"graph is on {graph.device}; the loader samples and fetches features on the "
                             "CPU: pass graph.to('cpu') and device='cuda' for the output")
        if not callable(getattr(graph_sampler, "sample", None)):
            raise TypeError(f"graph_sampler must be a dgl.dataloading sampler (with .sample), got "
                            f"{type(graph_sampler).__name__}")
        node_names, edge_names = _feature_names(graph, graph_sampler)
        node_attrs = {k: _common.host_table(graph.ndata[k], f"graph.ndata[{k!r}]") for k in node_names}
        edge_attrs = {k: _common.host_table(graph.edata[k], f"graph.edata[{k!r}]") for k in edge_names}
        out_device = torch.device(device) if device is not None else torch.device("cpu")
        self.features = plan_features(node_attrs, features=features, device_cache=device_cache, device=out_device,
                                      indices=lambda: graph.edges()[0].numpy(), codec=codec)
        self._codecs: dict[GroupKey, Codec] = _common.setup_codecs(
            {**self.features.codec_attrs, **node_attrs}, edge_attrs, num_nodes=graph.num_nodes(), num_edges=graph.num_edges(), codec=codec,
            device=out_device)
        super().__init__(graph, indices, _CompressingSampler(graph_sampler, self._codecs, self.features), device=device,
                         use_ddp=use_ddp, ddp_seed=ddp_seed, batch_size=batch_size, drop_last=drop_last,
                         shuffle=shuffle, use_prefetch_thread=use_prefetch_thread,
                         use_alternate_streams=use_alternate_streams, pin_prefetcher=pin_prefetcher,
                         use_uva=False, gpu_cache=None, **kwargs)
        self.graph_sampler = graph_sampler  # the user's; the wrapper lives in collate_fn
        self._stage, self.stats = _common.decode_stage(self._codecs, self.device, prefetch, self.features)

    @property
    def codecs(self) -> dict[str, Codec]:
        """The codec of each group of a batch, by the group's printed name (as in `stats`)."""
        return _common.by_name(self._codecs)

    def __iter__(self) -> Iterator[tuple]:
        it = super().__iter__()
        batches = _common.name_worker_deaths(it, "CompressedDGLDataLoader", "sampling, fetching or encoding",
                                             lambda: _common.worker_processes(it))
        for decoded in self._stage(_with_graphs(batches)):
            yield _fill(decoded)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(sampler={type(self.graph_sampler).__name__}, batches={len(self)}, "
                f"codecs={ {k: c.name for k, c in self.codecs.items()} }, device={self.device})")


def _with_graphs(batches: Iterator[tuple]) -> Iterator[EncodedBatch]:
    """DGL's (input_nodes, output_nodes, blocks, _Encoded) -> the EncodedBatch, the three riding in its meta."""
    for input_nodes, output_nodes, blocks, enc in batches:
        yield replace(enc.batch, meta=replace(enc.batch.meta, sampled=(input_nodes, output_nodes, blocks)))


def _fill(decoded: DecodedBatch) -> tuple:
    """DGL's (input_nodes, output_nodes, blocks), the decoded features put where DGL puts them."""
    meta: _Meta = decoded.meta
    input_nodes, output_nodes, blocks = meta.sampled
    graphs = blocks if isinstance(blocks, (list, tuple)) else [blocks]
    for s in meta.slots:
        getattr(graphs[s.graph], s.view)[s.key] = decoded[s.name]
    return input_nodes, output_nodes, blocks


def _names(value: Any, argname: str) -> list[str]:
    if isinstance(value, dict):
        raise NotImplementedError(f"graph_sampler.{argname}={value!r} is per type; heterogeneous graphs "
                                  "are not supported (use a list of names)")
    return list(value or [])


def _feature_names(graph, sampler) -> tuple[list[str], list[str]]:
    """Node and edge feature names the sampler prefetches (DGL's BlockSampler attributes)."""
    nodes = _names(getattr(sampler, "prefetch_node_feats", None), "prefetch_node_feats") + \
        _names(getattr(sampler, "prefetch_labels", None), "prefetch_labels")
    edges = _names(getattr(sampler, "prefetch_edge_feats", None), "prefetch_edge_feats")
    if not nodes and not edges:
        raise ValueError(f"graph_sampler ({type(sampler).__name__}) prefetches no features, so there is "
                         "nothing to compress; name them on the sampler as for DGL's DataLoader, e.g. "
                         "NeighborSampler(fanouts, prefetch_node_feats=['feat'], prefetch_labels=['label'])")
    for names, data, what in ((nodes, graph.ndata, "graph.ndata"), (edges, graph.edata, "graph.edata")):
        missing = [n for n in names if n not in data]
        if missing:
            raise KeyError(f"graph_sampler prefetches {missing}, not in {what} (has {sorted(data.keys())})")
    return list(dict.fromkeys(nodes)), list(dict.fromkeys(edges))
