"""CompressedNeighborLoader: PyG's NeighborLoader, for Data and HeteroData, with features compressed on the way
to the GPU. One class; where PyG's NodeLoader branches on the graph kind (reading the input, the sampler, its
output made Data or HeteroData), it asks its kind: `_Homo` or `_Hetero`."""
from __future__ import annotations

import functools
import warnings
import weakref
from typing import Any, Callable, Iterator, List, Mapping, Optional, Union

import numpy as np
import torch
from torch.utils.data import DataLoader

from ibp_graph.data.store import EncodedTable
from ibp_graph.index_checks import check_node_table
from ibp_graph.loaders import _common
from ibp_graph.loaders._common import ADJ_T
from ibp_graph.loaders.pyg_stores import is_hetero_input, is_store_pair, read_stores
from ibp_graph.pipeline.batch import DecodedBatch, EncodedBatch
from ibp_graph.pipeline.codec_setup import CODEC_NAMES, CodecSpec, split_row_groups
from ibp_graph.pipeline.cache import degree_hotness
from ibp_graph.pipeline.features import check_features, neighbour_hotness, plan_features
from ibp_graph.pipeline.link_plans import LinkPlanner, edge_list, link_name
from ibp_graph.pipeline.plans import (INPUT_ID, SEED_TIME, HeteroPlanner, NeighborPlanner, edge_name, node_name,
                                      one_type)
from ibp_graph.pipeline.producer import BatchProducer
from ibp_graph.pipeline.requests import BatchRequest, BatchRequests, DrawnRequests, check_batch_size
from ibp_graph.pipeline.sources import FeatureSource, Origin
from ibp_graph.sampling.graph import CSCGraph, index_dtype, sorted_by_time
from ibp_graph.sampling.hetero import EdgeType, HeteroNeighborSampler, HeteroSamplerOutput, TypedCSC
from ibp_graph.sampling.links import NegativeSampling as LinkNegatives
from ibp_graph.sampling.links import prepare_edge_label
from ibp_graph.sampling.neighbor import SUBGRAPH_TYPES, NeighborSampler

try:
    from torch_geometric.data import Data, HeteroData
    from torch_geometric.loader import LinkNeighborLoader, NeighborLoader
    from torch_geometric.loader.base import DataLoaderIterator
    from torch_geometric.loader.utils import infer_filter_per_worker
    from torch_geometric.sampler import HeteroSamplerOutput as PyGHeteroSamplerOutput
    from torch_geometric.sampler import EdgeSamplerInput, NegativeSampling, NodeSamplerInput
    from torch_geometric.sampler import SamplerOutput as PyGSamplerOutput
    from torch_geometric.sampler.base import NumNeighbors
except ImportError as e:  # pragma: no cover - exercised only without torch_geometric
    raise ImportError("ibp_graph.loaders.pyg needs torch_geometric: pip install 'ibp-graph[pyg]'") from e


#: the arguments both loaders take and hand to _SampledLoader._setup as they are.
_SHARED = ("data", "num_neighbors", "replace", "subgraph_type", "disjoint", "temporal_strategy", "time_attr",
           "weight_attr", "transform", "transform_sampler_output", "filter_per_worker", "directed", "codec", "device",
           "prefetch", "features", "device_cache", "edge_ids", "kwargs")


def _check_edge_ids(edge_ids, named: List[str]) -> None:
    """Refuse a non-bool `edge_ids`, and False for a graph whose edges carry attributes (`named`)."""
    if not isinstance(edge_ids, bool):
        raise TypeError(f"edge_ids={edge_ids!r} is not accepted; use True (batches carry e_id) or False")
    if not edge_ids and named:
        adj_t = [n for n in named if n.split(".")[-1] == ADJ_T]  # the graph itself, its values gathered by edge id
        raise ValueError(f"edge_ids=False is not accepted for a graph with edge attributes ({', '.join(named)}): "
                         "batches gather them by edge id; accepted: edge_ids=True, or the graph without them"
                         + (f" ({', '.join(adj_t)}: the graph as edge_index)" if adj_t else ""))


class _SampledLoader(_common.Codecs):
    """What the node and link loaders share (PyG's NodeLoader and LinkLoader share it likewise): the graph's
    kind, its sampler, codecs, producer, requests and decode stage, built from the arguments both take;
    iteration, collate_fn/filter_fn, reading `self.data` again each epoch, pickling. A loader differs in its
    inputs: its `_planner()` (the batch plans of its seeds), `_finish_kind(batch)` (the kind's batch plus
    its own fields)."""

    def _refuse_neighbor_sampler(self, neighbor_sampler) -> None:
        _common.start()
        if neighbor_sampler is not None:
            raise NotImplementedError(
                f"{type(self).__name__} does not support neighbor_sampler={neighbor_sampler!r}: sampling and "
                "gathering happen together in the workers, with the loader's own sampler (accepted: "
                "neighbor_sampler=None)")

    def _setup(self, *, data, num_neighbors, replace, subgraph_type, disjoint, temporal_strategy, time_attr,
               weight_attr, transform, transform_sampler_output, filter_per_worker, directed, codec, device,
               prefetch, features, device_cache, edge_ids, kwargs: dict) -> int:
        """The checks, fields, kind and sampler both loaders make from their shared arguments; `kwargs`
        (DataLoader's) lose what PyG's loaders drop; returns the batch size."""
        subgraph_type = _subgraph_type(subgraph_type, directed)
        if not isinstance(disjoint, bool):
            raise TypeError(f"disjoint={disjoint!r} is not accepted; use a bool")
        if disjoint and subgraph_type == "induced":
            raise ValueError("disjoint=True with subgraph_type='induced' is not accepted (nor by PyG); "
                             "use one of them")
        if filter_per_worker not in (None, True, False):
            raise ValueError(f"filter_per_worker={filter_per_worker!r} is not accepted; use None, True or False")
        if is_store_pair(data) and weight_attr is not None:
            raise NotImplementedError(
                f"weight_attr={weight_attr!r} with (FeatureStore, GraphStore) data is not supported (nor by PyG): "
                "the feature store's edge groups are not read; accepted: None, or the graph as a Data or HeteroData")
        kwargs.pop("dataset", None)  # as PyG's NodeLoader and LinkLoader (PyTorch Lightning passes them)
        kwargs.pop("collate_fn", None)
        if kwargs.get("custom_cls") is not None:
            raise NotImplementedError(f"custom_cls={kwargs['custom_cls']!r} is not supported: it is for remote "
                                      "(FeatureStore, GraphStore) backends; accepted: None")
        kwargs.pop("custom_cls", None)
        self.input_id = kwargs.pop("input_id", None)
        batch_size = check_batch_size(kwargs.pop("batch_size", 1))
        # the loaders' fields, which PyG's helpers read
        self.data, self.transform = data, transform
        self.transform_sampler_output = transform_sampler_output
        self.filter_per_worker = infer_filter_per_worker(data) if filter_per_worker is None else filter_per_worker
        self.custom_cls, self.subgraph_type = None, subgraph_type
        self.device, self._prefetch, self._codec_spec = _common.loader_device(device), prefetch, codec
        self._hetero = hetero = isinstance(data, HeteroData) or is_hetero_input(data)
        check_features(features)
        self._kind = kind = (_Hetero if hetero else _Homo)(self, data, time_attr, weight_attr)
        _check_edge_ids(edge_ids, kind.edge_attr_names())
        self._edge_ids = edge_ids
        self._sampler = kind.sampler(num_neighbors, replace=replace, subgraph_type=subgraph_type,
                                     disjoint=disjoint, temporal_strategy=temporal_strategy, edge_ids=edge_ids)
        bidirectional = hetero and subgraph_type == "bidirectional"  # the homogeneous sampler makes its own
        self._post_sample = _PostSample(bidirectional, transform_sampler_output) \
            if bidirectional or transform_sampler_output is not None else None
        self._feature_options = dict(features=features, device_cache=device_cache)
        return batch_size

    def _start(self, num_inputs: int, batch_size: int, rank, world_size, kwargs: dict) -> None:
        """Codecs, producer, the epoch's requests over `num_inputs` inputs, decode stage, warm-up, then
        DataLoader's __init__ (not PyG's loaders', which build PyG's sampler input and need pyg-lib)."""
        self._codecs = self._with_own_codecs(self._kind.codecs(**self._feature_options))
        self._producer = producer = BatchProducer(self._planner(), self._codecs)
        self.requests = _requests(num_inputs, batch_size, shuffle=kwargs.pop("shuffle", False),
                                  drop_last=kwargs.pop("drop_last", False), generator=kwargs.pop("generator", None),
                                  rank=rank, world_size=world_size, sampler=kwargs.pop("sampler", None),
                                  batch_sampler=kwargs.pop("batch_sampler", None))
        self._stage, self.stats = _common.decode_stage(self._codecs, self.device, self._prefetch, self.features)
        self._warm(kwargs.get("num_workers", 0))
        self._seen = _snapshot(self.data)
        kwargs.setdefault("pin_memory", self.device.type == "cuda")
        if kwargs.get("num_workers", 0) == 0 and not kwargs.get("persistent_workers"):
            kwargs.pop("persistent_workers", None)
        DataLoader.__init__(self, producer, batch_size=None, sampler=self.requests,
                            collate_fn=_common.WeakLoaderMethod(self.collate_fn), **kwargs)

    def _warm(self, num_workers: int) -> None:
        """Compile (or load from numba's cache) the kernels the batches will run, here, from a batch of two inputs
        (BatchProducer.warm): with DataLoader workers every kernel they run (they inherit them), else the
        sampler's."""
        n = len(self._producer)
        if n:
            self._producer.warm(BatchRequest(index=torch.arange(min(2, n)), seed=0), workers=num_workers > 0)

    def _own_tables(self) -> dict:
        """1-d samples of the tensors the loader's batches carry besides the graph's (their groups need codecs):
        a given input_id, in its own dtype (PyG only indexes it)."""
        input_id = self.input_data.input_id
        return {} if input_id is None else {INPUT_ID: input_id.reshape(-1)}

    def _with_own_codecs(self, codecs: dict) -> dict:
        """`codecs` (the kind's), with codecs for the groups only the loader's own tensors form."""
        own = self._own_tables()
        if not own:
            return codecs
        # a codec object serves the graph's group it matches; these groups get "auto", as build_codecs gives
        # every group a codec object does not match
        spec = self._codec_spec if isinstance(self._codec_spec, str) else "auto"
        extra = _common.setup_codecs({}, own, num_nodes=1, num_edges=1, codec=spec, device=self.device)
        return {**{k: c for k, c in extra.items() if k not in codecs}, **codecs}

    def set_epoch(self, epoch: int) -> None:
        """Distributed runs: a new shuffle of the inputs, the same on every rank."""
        self.requests.set_epoch(epoch)

    def collate_fn(self, index: Union[torch.Tensor, List[int], BatchRequest, EncodedBatch]) -> Any:
        """PyG's: the batch of these input positions, sampled, gathered and encoded (with the
        loader's own seed for a BatchRequest, else one drawn from torch's RNG), finished into a
        Data by filter_fn when filter_per_worker; a batch the loader's workers produced passes."""
        if isinstance(index, EncodedBatch):
            return index
        if not isinstance(index, BatchRequest):
            index = BatchRequest(index=torch.as_tensor(index, dtype=torch.int64).reshape(-1),
                                 seed=int(torch.randint(0, 2**62, (1,))))
        out = self.dataset[index]
        return self.filter_fn(out) if self.filter_per_worker else out

    def filter_fn(self, out: EncodedBatch) -> Union[Data, HeteroData]:
        """PyG's: an encoded batch decoded on `device` and made the loader's Data or HeteroData."""
        if self.device.type == "cuda" and torch.utils.data.get_worker_info() is not None:
            raise RuntimeError(
                f"{type(self).__name__}.filter_fn runs in a DataLoader worker (e.g. ZipLoader with "
                f"filter_per_worker=True and num_workers > 0) but device={str(self.device)!r} cannot decode in a "
                "forked worker; accepted: filter_per_worker=False (decode in the main process) or device='cpu'")
        return self._finish(next(iter(self._own_stage()(iter([out])))))

    def _own_stage(self):
        """The decode stage; a copy or an unpickled loader (a spawned worker) makes its own, counting into
        the loader's stats."""
        if self._stage is None:
            self._stage = _common.decode_stage(self._codecs, self.device, self._prefetch, self.features,
                                               stats=self.stats)[0]
        return self._stage

    def _get_iterator(self):
        # torch's iterator of encoded batches (decoding follows in __iter__); PyG's wrapper around
        # it when filter_per_worker is False, as NodeLoader (the batches are the same either way)
        it = self._producer.ring.start(lambda: DataLoader._get_iterator(self))
        _common.shut_down_with(self, it)
        return it if self.filter_per_worker else DataLoaderIterator(it, _identity)

    def __iter__(self) -> Iterator[Union[Data, HeteroData]]:
        self._read_data_again()
        it = DataLoader.__iter__(self)
        batches = _common.name_worker_deaths(it, type(self).__name__, "sampling, gathering or encoding",
                                             lambda: _common.worker_processes(getattr(it, "iterator", it)))
        for batch in self._own_stage()(batches):
            yield self._finish(batch)

    def _read_data_again(self) -> None:
        """PyG reads `self.data` at every batch: an attribute deleted, replaced or added since the last
        epoch (by name and object identity, a cheap check) is read again, as the constructor reads it
        (codecs set up for new groups), and a deleted one leaves the batches. Persistent workers that
        have started keep their copy (as PyG's), and so does this loader then."""
        seen = _snapshot(self.data)
        if seen == self._seen or seen is None or getattr(self, "_iterator", None) is not None:
            return
        codecs = self._with_own_codecs(self._kind.read_again(self.data))
        _check_edge_ids(self._edge_ids, self._kind.edge_attr_names())  # an edge attribute added since
        self._codecs = {k: self._codecs.get(k, c) for k, c in codecs.items()}  # unchanged groups keep theirs
        self._producer.codecs = dict(self._codecs)
        self._producer.planner = self._planner()
        self._stage, self.stats = _common.decode_stage(self._codecs, self.device, self._prefetch, self.features,
                                                       stats=self.stats)
        self._warm(self.num_workers)  # the new tables' gathers
        self._seen = seen

    def _finish(self, batch: DecodedBatch) -> Union[Data, HeteroData]:
        """The batch as PyG's filter_fn makes it for the graph kind, then `transform`."""
        data = self._finish_kind(batch)
        return self.transform(data) if self.transform is not None else data

    def __getstate__(self) -> dict:
        # what a spawned worker needs (collate_fn is a method: pickling it pickles the loader);
        # the decode stage (a CUDA stream) and a live iterator stay here
        return {**self.__dict__, "_stage": None, "_iterator": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if getattr(self._kind, "_loader", lambda: None)() is None:  # unpickled: the weak reference was not
            self._kind.attach(self)  # (a shallow copy shares the kind, which keeps serving the original)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"  # PyG's NodeLoader / LinkLoader repr

    def describe(self) -> str:
        """What this loader samples and how it sends each group (fan-outs, codecs, device, features)."""
        features = "worker" if self.features is None else self.features.describe()
        return (f"{type(self).__name__}({'' if self.input_type is None else f'input_type={self.input_type!r}, '}"
                f"num_neighbors={self._sampler.num_neighbors}, batches={len(self)}, "
                f"codecs={ {k: c.name for k, c in self.codecs.items()} }, device={self.device}, features={features})")


class CompressedNeighborLoader(_SampledLoader, NeighborLoader):
    """Drop-in for torch_geometric.loader.NeighborLoader that sends compressed rows to the device.

    A subclass of PyG's NeighborLoader (its helpers accept it: ``BasicGNN.inference``, ``ZipLoader``,
    ``CachedLoader``, ``loader(index)``), built without pyg-lib: sampling, gathering and encoding happen
    in the DataLoader workers, decoding on `device` in this process, `prefetch` batches ahead.

    `data` is one of
    - a `Data` (node attributes may be tensors of any dtype, numpy arrays or np.memmaps, read through a
      view, or pre-encoded `EncodedTable`s; graph-level attributes are in every batch unchanged; a graph
      without edges gives batches of the seeds) or a tuple `(features, graph)`: a dict of node attributes
      (tensors or EncodedTables) and a `CSCGraph`, e.g. a prepared data set read from disk;
    - a `HeteroData`, or per-type tables ``(features, graph[, num_nodes])``: ``{node type: {attr: tensor |
      array | EncodedTable}}``, ``{edge type: TypedCSC}`` and optionally ``{node type: count}`` (a prepared
      heterogeneous folder, served without building any edge_index; batch ``e_id`` are the TypedCSCs';
      with `num_nodes` every type's ``num_nodes`` is in the batches);
    - PyG's remote backend `(FeatureStore, GraphStore)`, either kind (loaders/pyg_stores.py: both stores
      are read once, here; batches carry what PyG's filter_custom_(hetero_)store puts in them: the
      feature store's node attributes, `num_nodes`, no edge or graph-level attributes).
    The class and its options are the same for either kind. As PyG, the loader reads `self.data` again
    at the start of each epoch (attribute names and object identity): an attribute deleted since is left
    out of the batches, one replaced or added is read as the constructor reads it; started persistent
    workers keep the copy they hold (as PyG's). A node attribute ``n_id`` (edge attribute ``e_id``) keeps
    the user's values, as in PyG.

    Arguments up to `directed` are NeighborLoader's, in its order, with PyG's semantics: `input_nodes`
    (heterogeneous: a node type, or ``(node type, None | mask | ids)``; ``input_id`` holds node ids for a
    mask, positions otherwise), `num_neighbors` (heterogeneous: a list for every edge type, a dict per
    edge type, or PyG's NumNeighbors), `weight_attr` (weighted sampling; heterogeneous: the edge types
    that have it), `subgraph_type` ("directional", "bidirectional": PyG's conversion of the sampled edges,
    "induced"; `directed=False` means "induced", as PyG), `disjoint` (`batch`), temporal sampling
    (`time_attr` naming node or edge times, `input_time`, `temporal_strategy`; disjoint, as PyG),
    `transform_sampler_output` (applied in the workers to PyG's (Hetero)SamplerOutput, whose ``metadata``,
    ``(input_id, seed_time)``, gives the batch's ``input_id``, ``seed_time`` and ``batch_size``, as in PyG) and
    `filter_per_worker` (either value gives the same batches: workers always sample, gather and encode,
    the main process decodes; it decides, as in PyG, whether `collate_fn(index)` returns the finished
    batch or the encoded one that `filter_fn` finishes). A `neighbor_sampler` raises NotImplementedError
    naming it.

    `codec` (``"auto"``, the default: per group the smallest of IBP and EBP, or identity when neither
    gains; ``"ibp"``, ``"ebp"``, ``"identity"`` or a fitted codec object; a dtype no codec has travels as
    identity bytes, named in `codecs`; groups several node types share get a codec per type where that
    pays: `split_report`), `device`, `prefetch`, `rank`/`world_size` (this process's share of every
    epoch's seeds; default: every seed, as PyG's loader, also under torch.distributed), `features` (where
    node features are read: ``"worker"``, ``"zero_copy"`` or ``"auto"``, pipeline.features),
    `device_cache` (bytes, or a fraction of device memory, for compressed hot rows: pipeline.cache; 0:
    none; shared equally by the feature tables, a table of node type t holding t's nodes most often drawn as
    neighbours) and `edge_ids` (False: batches carry no ``e_id``, and the sampler never reads the graph's edge
    ids, one random memory access less per sampled edge; refused for a graph with edge attributes, which
    are gathered by edge id) are ours. Remaining keyword arguments go to DataLoader (`batch_size`,
    `shuffle`, `drop_last`, `generator`, `sampler` or `batch_sampler` over input positions, `num_workers`,
    ...); `dataset` and
    `collate_fn` are dropped, as PyG's NodeLoader does.

    Starting a loader makes numba's threading layer fork-safe unless the user chose one
    (ibp_graph.threads), and compiles the kernels once in this process (a warm-up encode per codec, and
    with workers one small batch produced with their kernels: BatchProducer.warm), so that forked workers
    inherit them and compile nothing.
    """

    def __init__(
        self,
        data: Union[Data, HeteroData, Any],
        num_neighbors: Union[List[int], Any],
        input_nodes: Any = None,
        input_time: Optional[torch.Tensor] = None,
        replace: bool = False,
        subgraph_type: str = "directional",
        disjoint: bool = False,
        temporal_strategy: str = "uniform",
        time_attr: Optional[str] = None,
        weight_attr: Optional[str] = None,
        transform: Optional[Callable] = None,
        transform_sampler_output: Optional[Callable] = None,
        is_sorted: bool = False,
        filter_per_worker: Optional[bool] = None,
        neighbor_sampler: Optional[Any] = None,
        directed: bool = True,
        *,
        codec: CodecSpec = "auto",
        device: Union[str, torch.device, None] = None,
        prefetch: int = 2,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        features: str = "auto",
        device_cache: Union[int, float] = 0,
        edge_ids: bool = True,
        **kwargs: Any,
    ):
        self._refuse_neighbor_sampler(neighbor_sampler)
        if input_time is not None and time_attr is None:
            raise ValueError("input_time is given but time_attr is None (as in PyG); accepted: input_time with "
                             "time_attr naming a node- or edge-level time attribute")
        self.input_nodes = input_nodes
        batch_size = self._setup(**{name: value for name, value in locals().items() if name in _SHARED})
        self.node_sampler = self._sampler
        self.input_type, seeds, mask = self._kind.seeds(input_nodes)
        input_id = _per_input(self.input_id, seeds.numel(), "input_id", "one id per input node")
        if input_id is None and mask:  # PyG reports input_id as node ids for a mask, as positions for ids or None
            input_id = seeds
        self.input_time = _input_time(input_time, seeds)
        self.input_data = NodeSamplerInput(input_id=input_id, node=seeds, time=self.input_time,
                                           input_type=self.input_type)
        self._start(seeds.numel(), batch_size, rank, world_size, kwargs)

    def _planner(self):
        """The batch plans of the input nodes; a temporal heterogeneous sampler's seeds need times: given, or
        their node type's."""
        kind, t = self._kind, self.input_type
        if self._hetero and self._sampler.temporal and self.input_time is None and t not in kind.timed:
            raise ValueError(f"time_attr={kind.time_attr!r} gives {t!r} nodes no time; accepted: input_time with "
                             "the seeds' times")
        return kind.planner(self.input_data.node, self.input_data.input_id, self.input_time, t)

    def _finish_kind(self, batch: DecodedBatch) -> Union[Data, HeteroData]:
        return self._kind.to_batch(batch)


class CompressedLinkNeighborLoader(_SampledLoader, LinkNeighborLoader):
    """Drop-in for torch_geometric.loader.LinkNeighborLoader that sends compressed rows to the device.

    A subclass of PyG's LinkNeighborLoader built without pyg-lib, on the node loader's data path
    (CompressedNeighborLoader: the same `data` forms, sampler, codecs, workers and decode stage): batches are
    seed edges, positions into `edge_label_index`, cut and shuffled as the node loader's input nodes; each
    batch's negatives are drawn in the workers from the batch's sampling seed (sampling.links: same seed, same
    batch, any `num_workers`), its seed nodes sampled (pipeline.link_plans) and its rows gathered, compressed
    and decoded on `device` as a node batch's.

    Arguments up to `directed` are LinkNeighborLoader's, in its order, with PyG's semantics: `edge_label_index`
    (a ``[2, E]`` tensor of (source, destination) ids, None: the graph's edges; heterogeneous: an edge type, or
    ``(edge type, None | [2, E] tensor)``; with ids, as PyG, also an edge type the graph has no edges of, between
    two of its node types), `edge_label` (with binary negatives shifted by one when its least
    label is 0: 0 is the negatives' label), `edge_label_time` (with `time_attr`, both or neither, as PyG:
    temporal sampling, disjoint), `neg_sampling` (None, "binary", "triplet", PyG's or our NegativeSampling
    with `amount` and per-endpoint weights) or `neg_sampling_ratio` (binary negatives), and the neighbour
    sampling options of CompressedNeighborLoader. Batches carry PyG's fields: the sampled subgraph as the
    node loader gives it (``n_id``, ``e_id``, ``batch`` for disjoint sampling, ``num_sampled_nodes`` /
    ``num_sampled_edges``, per type for a HeteroData), ``input_id`` (the seed edges' positions, or the given
    `input_id`), and ``edge_label_index`` (local ids), ``edge_label``, ``edge_label_time`` (binary or no
    negatives) or ``src_index``, ``dst_pos_index``, ``dst_neg_index``, ``seed_time`` (triplet; on the
    endpoints' node types for a HeteroData), read, as in PyG, from the metadata `transform_sampler_output`
    leaves on PyG's SamplerOutput (it gets ``(input_id, edge_label_index, edge_label, edge_label_time)``, triplet
    ``(input_id, src_index, dst_pos_index, dst_neg_index, seed_time)``); link fields the graph stores (e.g.
    RandomLinkSplit's) are replaced by the batch's. `codec`, `device`, `prefetch`, `features`, `device_cache`,
    `edge_ids`, `rank` and `world_size` are ours, as in CompressedNeighborLoader; the rest go to DataLoader.
    """

    def __init__(
        self,
        data: Union[Data, HeteroData, Any],
        num_neighbors: Union[List[int], Any],
        edge_label_index: Any = None,
        edge_label: Optional[torch.Tensor] = None,
        edge_label_time: Optional[torch.Tensor] = None,
        replace: bool = False,
        subgraph_type: str = "directional",
        disjoint: bool = False,
        temporal_strategy: str = "uniform",
        neg_sampling: Any = None,
        neg_sampling_ratio: Optional[Union[int, float]] = None,
        time_attr: Optional[str] = None,
        weight_attr: Optional[str] = None,
        transform: Optional[Callable] = None,
        transform_sampler_output: Optional[Callable] = None,
        is_sorted: bool = False,
        filter_per_worker: Optional[bool] = None,
        neighbor_sampler: Optional[Any] = None,
        directed: bool = True,
        *,
        codec: CodecSpec = "auto",
        device: Union[str, torch.device, None] = None,
        prefetch: int = 2,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        features: str = "auto",
        device_cache: Union[int, float] = 0,
        edge_ids: bool = True,
        **kwargs: Any,
    ):
        self._refuse_neighbor_sampler(neighbor_sampler)
        if (edge_label_time is not None) != (time_attr is not None):
            # PyG's words (code matching its message still matches), then what is accepted
            raise ValueError(f"Received conflicting 'edge_label_time' and 'time_attr' arguments: 'edge_label_time' is "
                             f"{'set' if edge_label_time is not None else 'not set'} while 'time_attr' is "
                             f"{'set' if time_attr is not None else 'not set'} (time_attr={time_attr!r}); accepted: "
                             "both (temporal sampling) or neither")
        if neg_sampling_ratio is not None and neg_sampling_ratio != 0.0:  # PyG's deprecated form of binary
            try:
                neg_sampling = LinkNegatives("binary", neg_sampling_ratio)
            except (TypeError, ValueError) as err:
                raise type(err)(f"neg_sampling_ratio={neg_sampling_ratio!r} is not accepted; use None, 0 (no "
                                "negatives) or a finite int or float > 0 (binary negatives per positive)") from None
        neg = LinkNegatives.cast(neg_sampling)
        self.edge_label_index = edge_label_index
        batch_size = self._setup(**{name: value for name, value in locals().items() if name in _SHARED})
        self.link_sampler = self._sampler
        self.input_type, src, dst = self._kind.seed_edges(edge_label_index)
        num_edges = int(src.numel())
        label = _per_input(prepare_edge_label(edge_label, neg), num_edges, "edge_label", "one label per seed edge",
                           rows=True)
        edge_label_time = _per_input(edge_label_time, num_edges, "edge_label_time", "one time per seed edge")
        input_id = _per_input(self.input_id, num_edges, "input_id", "one id per seed edge")
        self._neg, self.input_time = neg, None
        self.neg_sampling = None if neg is None else NegativeSampling(  # PyG's record, which its helpers read
            neg.mode, neg.amount, *(None if w is None else torch.from_numpy(w.copy())
                                    for w in (neg.src_weight, neg.dst_weight)))
        self.input_data = EdgeSamplerInput(input_id=input_id, row=src, col=dst, label=label, time=edge_label_time,
                                           input_type=self.input_type)
        self._start(num_edges, batch_size, rank, world_size, kwargs)

    def _planner(self) -> LinkPlanner:
        """The link batches of the seed edges, planned by the kind's planner."""
        kind, inputs, edge_type = self._kind, self.input_data, self.input_type
        types = (None, None) if edge_type is None else (edge_type[0], edge_type[-1])
        inner = kind.planner(inputs.row, inputs.input_id, None, types[0])
        num_src, num_dst = kind.node_counts(edge_type)
        node_time = kind.node_times(edge_type) if self._neg is not None else (None, None)
        return LinkPlanner(inner, inputs.row, inputs.col, num_src_nodes=num_src, num_dst_nodes=num_dst,
                           edge_type=edge_type, edge_label=inputs.label, edge_label_time=inputs.time,
                           neg_sampling=self._neg, node_time=node_time,
                           post_sample=self._post_sample)

    def _own_tables(self) -> dict:
        """The labels (binary: with a negative's zero) and times the link fields carry, flattened."""
        label, time, neg = self.input_data.label, self.input_data.time, self._neg
        if neg is not None and neg.is_binary:
            label = torch.ones(1) if label is None else label
            label = torch.cat([label.reshape(-1), label.new_zeros(1)])
        own = {**super()._own_tables(), **({} if label is None else {link_name("edge_label"): label.reshape(-1)})}
        return own if time is None else {**own, link_name("edge_label_time"): time.reshape(-1)}

    def _finish_kind(self, batch: DecodedBatch) -> Union[Data, HeteroData]:
        """The kind's batch of the sampled subgraph, with LinkLoader's fields (its filter_fn)."""
        link = {f: batch.pop(link_name(f)).view(shape) for f, shape in batch.meta["link"].items()}
        data = self._kind.to_batch(batch)
        edge_type, triplet = self.input_type, self._neg is not None and self._neg.is_triplet
        store = data if edge_type is None else data[edge_type]
        del store.batch_size  # LinkLoader's batches have none
        # every field as PyG assigns it from the metadata: one a transform_sampler_output set to None is absent
        if not triplet:
            store.edge_label_index = link.get("edge_label_index")
            store.edge_label = link.get("edge_label")
            store.edge_label_time = link.get("edge_label_time")
            return data
        src, dst = (data, data) if edge_type is None else (data[edge_type[0]], data[edge_type[-1]])
        src.src_index = link.get("src_index")
        dst.dst_pos_index = link.get("dst_pos_index")
        dst.dst_neg_index = link.get("dst_neg_index")
        src.seed_time = dst.seed_time = link.get("edge_label_time")
        for key in ("edge_label_index", "edge_label_time"):  # PyG's sanity removals
            if key in store:
                del store[key]
        return data


class _Kind:
    """What both graph kinds share: the loader they serve, referenced weakly (the loader holds its kind;
    a cycle would leave a dropped loader to the cyclic collector, see _common.WeakLoaderMethod)."""

    def attach(self, loader: "_SampledLoader") -> None:
        self._loader = weakref.ref(loader)

    @property
    def loader(self) -> "_SampledLoader":
        loader = self._loader()
        if loader is None:
            raise RuntimeError(f"{type(self).__name__}: its loader was freed")
        return loader

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_loader"}


class _Homo(_Kind):
    """A Data, (features, CSCGraph) or homogeneous stores: a CSCGraph, node and edge tables, graph-level
    attributes; sampled by NeighborSampler, planned by NeighborPlanner, made Data (PyG's filter_data)."""

    def __init__(self, loader: CompressedNeighborLoader, data, time_attr: Optional[str], weight_attr: Optional[str]):
        self.attach(loader)
        graph, self.node_attrs, self.edge_attrs, self.graph_attrs, self.dims = _graph_and_attrs(data)
        # PyG sets a batch's num_nodes when the graph's was set, and for a feature store with attributes
        self.set_num_nodes = (isinstance(data, Data) and "num_nodes" in data) or (
            is_store_pair(data) and bool(self.node_attrs))
        loader.graph = self.graph = graph
        self.weight = _edge_weight(data, weight_attr, graph.num_edges)
        self.times = _times(data, time_attr, graph.num_nodes, graph.num_edges, self.node_attrs)

    def edge_attr_names(self) -> List[str]:
        return list(self.edge_attrs)

    def sampler(self, num_neighbors, **options) -> NeighborSampler:
        if isinstance(num_neighbors, NumNeighbors):  # PyG's wrapper: a homogeneous graph reads its get_values()
            num_neighbors = num_neighbors.get_values()
        return NeighborSampler(self.graph, num_neighbors, weight=self.weight, node_time=self.times[0],
                               edge_time=self.times[1], **options)

    def seeds(self, input_nodes) -> tuple[None, torch.Tensor, bool]:
        if isinstance(input_nodes, (tuple, str)):
            raise NotImplementedError(f"input_nodes={input_nodes!r}: heterogeneous node types are not supported")
        return (None,) + _node_ids(input_nodes, self.graph.num_nodes, "input_nodes", "node", "the graph")

    def seed_edges(self, edge_label_index) -> tuple[None, torch.Tensor, torch.Tensor]:
        """LinkLoader's seed edges: `edge_label_index` ([2, E], or ``(None | edge type, None | [2, E])`` as PyG takes
        for remote stores), None: the graph's edges; (None, sources, destinations)."""
        if isinstance(edge_label_index, (tuple, list)) and edge_label_index and \
                all(isinstance(t, str) for t in edge_label_index):
            raise ValueError(f"edge_label_index={edge_label_index!r} is an edge type, which a homogeneous graph does "
                             "not have; accepted: None (the graph's edges), a [2, E] tensor of (source, "
                             "destination) ids, or (None, None | [2, E] tensor)")
        if isinstance(edge_label_index, (tuple, list)) and len(edge_label_index) == 2 and _edge_type_like(
                edge_label_index[0]):  # PyG's remote form: (None, ids), the one edge type of a homogeneous store
            edge_label_index = edge_label_index[1]
        n = self.graph.num_nodes
        return (None,) + _edge_ids(edge_label_index, self.graph, n, n, "edge_label_index", "the graph")

    def node_counts(self, edge_type: None) -> tuple[int, int]:
        return self.graph.num_nodes, self.graph.num_nodes

    def node_times(self, edge_type: None) -> tuple:
        """Node-level times of the sources and destinations (negatives must exist at their positive's time)."""
        return self.times[0], self.times[0]

    def codecs(self, **feature_options) -> dict:
        """The feature plan of the node attributes (set on the loader) and the codecs of the batches."""
        self.feature_options = feature_options
        loader, graph = self.loader, self.graph
        loader.features = plan_features(self.node_attrs, device=loader.device, codec=loader._codec_spec,
                                        hotness=neighbour_hotness(graph.indices, graph.num_nodes),
                                        origin=lambda name, t: Origin(t, f"data.{name}", _RE_ENCODE), **feature_options)
        return _common.setup_codecs(loader.features.codec_attrs, self.edge_attrs, num_nodes=graph.num_nodes,
                                    num_edges=graph.num_edges, codec=loader._codec_spec, device=loader.device)

    def read_again(self, data: Data) -> dict:
        """The attributes of `data` read as the constructor reads them (the graph stays); the codecs."""
        node, edge, self.graph_attrs, self.dims = _split(data, "data.{}".format, self.graph.num_nodes,
                                                         self.graph.num_edges, (EncodedTable, FeatureSource))
        self.node_attrs = node
        self.edge_attrs = {**({ADJ_T: self.edge_attrs[ADJ_T]} if ADJ_T in self.edge_attrs else {}), **edge}
        self.set_num_nodes = "num_nodes" in data
        return self.codecs(**self.feature_options)

    def planner(self, inputs: torch.Tensor, input_ids: Optional[torch.Tensor], input_time: Optional[torch.Tensor],
                input_type: None = None) -> NeighborPlanner:
        """The batch plans of seeds picked from `inputs` (their ids, times)."""
        loader = self.loader
        return NeighborPlanner(loader._sampler, inputs, loader.features.node_attrs, self.edge_attrs,
                               input_ids=input_ids, input_time=input_time, post_sample=loader._post_sample)

    def to_batch(self, batch: DecodedBatch) -> Data:
        """NeighborLoader's Data: the named tensors, and its fields from the batch's meta."""
        tensors = {k: _cat_back(v, self.dims.get(k)) for k, v in batch.items()}
        if ADJ_T in tensors:  # the graph came as adj_t: so do the batches (PyG's filter_edge_store_)
            n = batch.meta["num_nodes"]
            tensors[ADJ_T] = _common.to_adj_t(tensors.pop("edge_index"), tensors[ADJ_T], n, n)
        data = Data(**{**self.graph_attrs, **tensors})  # graph-level attributes as given (PyG's filter_data)
        if self.set_num_nodes:
            data.num_nodes = batch.meta["num_nodes"]
        data.batch_size = batch.meta["num_seeds"]
        if batch.meta["nodes_per_hop"] is not None:  # None for the bidirectional and induced subgraphs
            data.num_sampled_nodes = batch.meta["nodes_per_hop"]
            data.num_sampled_edges = batch.meta["edges_per_hop"]
        return data


class _Hetero(_Kind):
    """A HeteroData, per-type tables or heterogeneous stores (_HeteroGraph); sampled by HeteroNeighborSampler
    (PyG's heterogeneous semantics; "bidirectional": converted edge types carry no ``e_id``, no edge
    attributes and no ``num_sampled_*``), planned by HeteroPlanner (flat names per type, so that row groups
    span types), made HeteroData (PyG's filter_hetero_data): per node type the gathered attributes,
    ``n_id``, ``num_sampled_nodes`` (``input_id``, ``batch_size``, ``seed_time`` on the input type), per
    edge type ``edge_index``, the gathered attributes, ``e_id``, ``num_sampled_edges``; store-level and
    graph-level attributes unchanged."""

    def __init__(self, loader: CompressedNeighborLoader, data, time_attr: Optional[str], weight_attr: Optional[str]):
        self.attach(loader)
        self.graph = _HeteroGraph(data, time_attr, weight_attr)
        self.time_attr, self.timed = time_attr, set(self.graph.node_time or ())  # node types with times

    def edge_attr_names(self) -> List[str]:
        return [edge_name(e, a) for e, attrs in self.graph.edge_attrs.items() for a in attrs]

    def sampler(self, num_neighbors, *, subgraph_type: str, **options) -> HeteroNeighborSampler:
        g = self.graph
        values, default = (num_neighbors.values, num_neighbors.default) \
            if isinstance(num_neighbors, NumNeighbors) else (num_neighbors, None)
        if isinstance(values, Mapping):  # PyG's EdgeTypeStr keys are strings "src__rel__dst"
            values = {tuple(k.split("__")) if isinstance(k, str) else k: v for k, v in values.items()}
        if (g.node_time is not None or g.edge_time is not None) and subgraph_type == "induced":
            raise ValueError("time_attr with subgraph_type='induced' is not accepted (nor by PyG): temporal "
                             "sampling is disjoint")
        sampler = HeteroNeighborSampler(g.num_nodes, g.csc, values, default=default,
                                        induced=subgraph_type == "induced", node_time=g.node_time,
                                        edge_time=g.edge_time, weight=g.weight, **options)
        self.disjoint = sampler.disjoint  # temporal sampling is disjoint (as PyG)
        return sampler

    def seeds(self, input_nodes) -> tuple[str, torch.Tensor, bool]:
        types = list(self.graph.num_nodes)
        if isinstance(input_nodes, str):
            input_type, nodes = input_nodes, None
        elif isinstance(input_nodes, (tuple, list)) and len(input_nodes) == 2 and isinstance(input_nodes[0], str):
            input_type, nodes = input_nodes
        else:
            raise ValueError(f"input_nodes={input_nodes!r} is not accepted for a HeteroData; use a node type "
                             f"(one of {types}) or (node type, None | boolean mask | node ids)")
        if input_type not in types:
            raise ValueError(f"input_nodes names node type {input_type!r}, which the graph does not have; "
                             f"node types: {types}")
        return (input_type,) + _node_ids(nodes, self.graph.num_nodes[input_type], "input_nodes[1]",
                                         f"{input_type!r} node", f"node type {input_type!r}")

    def seed_edges(self, edge_label_index) -> tuple[EdgeType, torch.Tensor, torch.Tensor]:
        """LinkLoader's seed edges: an edge type (all its edges) or ``(edge type, None | [2, E])``; (edge type,
        sources, destinations)."""
        if isinstance(edge_label_index, (tuple, list)) and len(edge_label_index) in (1, 2, 3) and \
                all(isinstance(t, str) for t in edge_label_index):
            edge_type, index = edge_label_index, None
        elif isinstance(edge_label_index, (tuple, list)) and len(edge_label_index) == 2 and \
                isinstance(edge_label_index[0], (tuple, list)):
            edge_type, index = edge_label_index
        else:
            given = f"a {type(edge_label_index).__name__} of shape {tuple(edge_label_index.shape)}" \
                if isinstance(edge_label_index, (torch.Tensor, np.ndarray)) else repr(edge_label_index)
            raise ValueError(f"edge_label_index={given} is not accepted for a heterogeneous graph; use an edge type "
                             f"(one of {self.graph.edge_types}) or (edge type, None | [2, E] tensor)")
        edge_type = self._edge_type(edge_type, ids_given=index is not None)
        src, _, dst = edge_type
        return (edge_type,) + _edge_ids(index, self.graph.csc.get(edge_type), self.graph.num_nodes[src],
                                        self.graph.num_nodes[dst], "edge_label_index[1]", f"edge type {edge_type!r}")

    def _edge_type(self, edge_type, ids_given: bool = False) -> EdgeType:
        """PyG's canonical edge type (HeteroData._to_canonical): (src, rel, dst) as given, (src, dst) or (rel,)
        when one edge type matches them. With the seed edges' ids given (`ids_given`), as PyG's
        get_edge_label_index, an edge type the graph has no edges of is taken too (supervision edges that message
        passing does not see): a triple as given, (src, dst) as (src, 'to', dst), its node types the graph's."""
        types = self.graph.edge_types
        edge_type = tuple(edge_type)
        found = [e for e in types if e == edge_type or len(edge_type) == 2 and (e[0], e[-1]) == edge_type
                 or len(edge_type) == 1 and e[1] == edge_type[0]]
        if not found and ids_given and len(edge_type) in (2, 3):
            canonical = edge_type if len(edge_type) == 3 else (edge_type[0], "to", edge_type[1])  # PyG's DEFAULT_REL
            missing = [t for t in (canonical[0], canonical[-1]) if t not in self.graph.num_nodes]
            if missing:
                raise ValueError(f"edge_label_index names edge type {edge_type!r}, but the graph has no node type "
                                 f"{missing[0]!r}; accepted: an edge type between its node types "
                                 f"{list(self.graph.num_nodes)}")
            return canonical
        if len(found) != 1:
            raise ValueError(f"edge_label_index names edge type {edge_type!r}, which "
                             + (f"matches several edge types ({found})" if found else "the graph does not have")
                             + f"; accepted: one of its edge types {types}")
        return found[0]

    def node_counts(self, edge_type: EdgeType) -> tuple[int, int]:
        return self.graph.num_nodes[edge_type[0]], self.graph.num_nodes[edge_type[-1]]

    def node_times(self, edge_type: EdgeType) -> tuple:
        """Node-level times of the source and destination types (negatives must exist at their positive's time)."""
        times = self.graph.node_time or {}
        return times.get(edge_type[0]), times.get(edge_type[-1])

    def codecs(self, **feature_options) -> dict:
        """The feature plan of every type's node tables (set on the loader; `features`, `device_cache` as for a
        Data: pipeline.features) and one codec per group, warmed up (_common.setup_codecs); row groups shared by
        several types are split per type where that pays (`split_report`)."""
        self.feature_options = feature_options
        g, loader, codec = self.graph, self.loader, self.loader._codec_spec
        nodes, edges = g.flat_tables()
        label = {node_name(t, a): f"data[{t!r}].{a}" for t, attrs in g.node_attrs.items() for a in attrs}
        loader.features = plan = plan_features(nodes, device=loader.device, hotness=self._hotness(), codec=codec,
                                               origin=lambda name, t: Origin(t, label[name], _RE_ENCODE),
                                               **feature_options)
        self.node_attrs = {t: {a: plan.node_attrs[node_name(t, a)] for a in attrs} for t, attrs in g.node_attrs.items()}
        nodes = plan.codec_attrs
        split = isinstance(codec, str) and codec in CODEC_NAMES and codec != "identity"
        codecs, self.typed, loader.split_report = _common.setup_codecs(
            nodes, edges, num_nodes=max(g.num_nodes.values(), default=0),
            num_edges=max((c.num_edges for c in g.csc.values()), default=0), codec=codec,
            device=loader.device, refine=lambda codecs: split_row_groups({**nodes, **edges}, codecs, kind=codec)
            if split else (codecs, {}, {}))
        return codecs

    def _hotness(self) -> Callable[[str], np.ndarray]:
        """plan_features' hotness: a table of node type t ranks t's nodes by their appearances in the neighbour
        lists of the edge types leaving t (how often the sampler can draw them), counted once per type, when
        first asked for."""
        g = self.graph
        type_of = {node_name(t, a): t for t, attrs in g.node_attrs.items() for a in attrs}

        @functools.lru_cache(maxsize=None)
        def counts(t) -> np.ndarray:
            n = g.num_nodes[t]
            return sum((degree_hotness(c.indices, n) for e, c in g.csc.items() if e[0] == t), np.zeros(n, np.int64))
        return lambda name: counts(type_of[name])

    def read_again(self, data: HeteroData) -> dict:
        """The attributes of `data` read as the constructor reads them (the sampled graph stays); the codecs."""
        # without time_attr, weight_attr: the sampler has read them; a type left without attributes keeps its count
        self.graph = _HeteroGraph(data, counts=self.graph.num_nodes)
        return self.codecs(**self.feature_options)

    def planner(self, inputs: torch.Tensor, input_ids: Optional[torch.Tensor], input_time: Optional[torch.Tensor],
                input_type: str) -> HeteroPlanner:
        """The batch plans of seeds of `input_type` picked from `inputs` (their ids, times)."""
        loader, g = self.loader, self.graph
        return HeteroPlanner(loader._sampler, input_type, inputs, self.node_attrs, g.edge_attrs, input_ids=input_ids,
                             input_time=input_time, typed_groups=self.typed, post_sample=loader._post_sample)

    def to_batch(self, batch: DecodedBatch) -> HeteroData:
        """NeighborLoader's HeteroData: every type's named tensors, and its fields from the batch's meta."""
        g, meta = self.graph, batch.meta
        out = HeteroData(**g.graph_attrs)
        for t in g.node_types:
            store = out[t]
            store.update({**g.node_other[t], **{a: g.gathered(t, a, batch[node_name(t, a)]) for a in g.node_attrs[t]}})
            if "n_id" not in g.node_attrs[t]:
                store.n_id = batch[node_name(t, "n_id")]
            if t in g.num_nodes_set:
                store.num_nodes = int(store.n_id.numel())
            if self.disjoint:
                store.batch = batch[node_name(t, "batch")]
            if meta["nodes_per_hop"] is not None:
                store.num_sampled_nodes = meta["nodes_per_hop"][t]
        for e in g.edge_types:
            store = out[e]
            store.update(g.edge_other[e])
            edge_index = batch[edge_name(e, "edge_index")].view(2, -1)
            for attr in g.edge_attrs[e]:  # absent where the subgraph's edges have no ids
                if edge_name(e, attr) in batch:
                    store[attr] = g.gathered(e, attr, batch[edge_name(e, attr)])
            if ADJ_T in g.edge_attrs[e]:  # the type came as adj_t: so does the batch (PyG's filter_edge_store_)
                store.adj_t = _common.to_adj_t(edge_index, store.adj_t, out[e[0]].n_id.numel(),
                                               out[e[2]].n_id.numel())
            else:
                store.edge_index = edge_index
            if "e_id" not in g.edge_attrs[e] and edge_name(e, "e_id") in batch:
                store.e_id = batch[edge_name(e, "e_id")]
            if meta["edges_per_hop"] is not None:
                store.num_sampled_edges = meta["edges_per_hop"][e]
        inputs = out[self.loader.input_type]
        inputs.input_id = batch[INPUT_ID]
        if self.loader.input_time is not None:
            inputs.seed_time = batch[SEED_TIME]
        inputs.batch_size = meta["num_seeds"]
        return out


class _PostSample:
    """In the workers, after sampling: PyG's bidirectional subgraph (heterogeneous: the homogeneous sampler
    makes its own), then `transform_sampler_output`, both on PyG's (Hetero)SamplerOutput, as NeighborLoader."""

    def __init__(self, bidirectional: bool, transform: Optional[Callable]):
        self.bidirectional, self.transform = bidirectional, transform

    def __call__(self, out: HeteroSamplerOutput, metadata: Any) -> tuple[HeteroSamplerOutput, Any]:
        """`out` mapped, with PyG's `metadata` on the output the transform gets (PyG's node_sample's
        ``(input_id, seed_time)``, a link batch's edge_sample's), and the metadata the transform left there."""
        fields = dict(node=out.node, row=out.row, col=out.col, edge=out.edge, batch=out.batch,
                      num_sampled_nodes=out.num_sampled_nodes, num_sampled_edges=out.num_sampled_edges)
        homogeneous = list(out.node) == [None]  # a homogeneous graph's output, typed as its one type
        if homogeneous:
            fields = {k: None if v is None else v[None] for k, v in fields.items()}
        pyg = (PyGSamplerOutput if homogeneous else PyGHeteroSamplerOutput)(**fields, metadata=metadata)
        if self.bidirectional:
            pyg = pyg.to_bidirectional(keep_orig_edges=False)
        if self.transform is not None:
            pyg = self.transform(pyg)
        if homogeneous:
            return one_type(pyg), pyg.metadata
        return HeteroSamplerOutput(**{k: getattr(pyg, k) for k in fields}), pyg.metadata


#: how a PyG user gets a table the loader encoded served compressed again after changing it in place.
_RE_ENCODE = ("to serve the new rows compressed, replace the attribute (the next epoch encodes it again: "
              "data.x = data.x.clone()) or build a new loader")


def _snapshot(data) -> Optional[tuple]:
    """What `data` holds, by store, attribute name and object identity (None: not a Data or HeteroData)."""
    if not isinstance(data, (Data, HeteroData)):
        return None
    return tuple((getattr(store, "_key", None), key, id(value)) for store in data.stores
                 for key, value in store.items())


def _identity(batch):
    return batch


def _subgraph_type(subgraph_type, directed: bool) -> str:
    """PyG's SubgraphType (or its value) as a string; directed=False is 'induced', as in PyG."""
    value = getattr(subgraph_type, "value", subgraph_type)
    if value not in SUBGRAPH_TYPES:
        raise ValueError(f"subgraph_type={subgraph_type!r} is not accepted; use one of {SUBGRAPH_TYPES}")
    if not directed:
        warnings.warn("directed=False is deprecated in PyG; use subgraph_type='induced' (which it means)",
                      DeprecationWarning, stacklevel=3)
        return "induced"
    return value


def _requests(num_inputs: int, batch_size: int, *, shuffle, drop_last, generator, rank, world_size,
              sampler, batch_sampler):
    """The epoch's BatchRequests: our shuffle/distributed split, or a user's (batch) sampler."""
    if sampler is None and batch_sampler is None:
        return BatchRequests(num_inputs, batch_size, shuffle=shuffle, drop_last=drop_last,
                             generator=generator, rank=rank, world_size=world_size)
    if sampler is not None and batch_sampler is not None:
        raise ValueError("sampler= and batch_sampler= are mutually exclusive (as in DataLoader); give one")
    if shuffle:
        raise ValueError(f"shuffle={shuffle!r} with a sampler= or batch_sampler= is not accepted (as in "
                         "DataLoader); the sampler decides the order")
    if rank is not None or world_size is not None:
        raise ValueError("rank/world_size with a sampler= or batch_sampler= is not accepted; "
                         "give the sampler its share (e.g. a DistributedSampler) instead")
    if batch_sampler is not None and (batch_size != 1 or drop_last):
        raise ValueError("batch_sampler= with batch_size or drop_last is not accepted (as in DataLoader); "
                         "the batch sampler makes the batches")
    return DrawnRequests(num_inputs, sampler=sampler, batch_sampler=batch_sampler, batch_size=batch_size,
                         drop_last=drop_last, generator=generator)


def _node_ids(nodes, n: int, name: str, node: str, where: str) -> tuple[torch.Tensor, bool]:
    """Seed node ids (int64) of input nodes `nodes` among `n` (None: all; a boolean mask; node ids), and
    whether a mask gave them; errors name the argument `name`, a node as `node`, the graph as `where`."""
    if nodes is None:
        return torch.arange(n), False
    t = nodes if isinstance(nodes, torch.Tensor) else torch.as_tensor(
        np.asarray(list(nodes) if isinstance(nodes, range) else nodes))
    if t.dtype == torch.bool:
        if t.dim() != 1 or t.numel() != n:
            raise ValueError(f"{name} is a boolean mask of shape {tuple(t.shape)}; {where} has {n} nodes: "
                             f"accepted, a mask of shape ({n},)")
        return t.nonzero().view(-1), True
    if t.dim() != 1 or t.dtype.is_floating_point or t.dtype.is_complex:
        raise TypeError(f"{name} must be None, a boolean mask or a 1-d tensor of node ids, got "
                        f"dtype={t.dtype} shape={tuple(t.shape)}")
    t = t.to(torch.int64).contiguous()
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= n):
        bad = int(t.min()) if int(t.min()) < 0 else int(t.max())
        raise IndexError(f"{name} contains {node} {bad}, outside [0, {n})")
    return t, False


def _edge_type_like(value) -> bool:
    """Whether `value`, the first entry of a 2-sequence `edge_label_index`, names an edge type (PyG's ``(edge type,
    None | [2, E])``; None: the one edge type of a homogeneous graph, as PyG's remote stores take it) rather than
    being a row of ids."""
    return value is None or isinstance(value, str) or isinstance(value, (tuple, list)) and len(value) in (1, 2, 3) \
        and all(isinstance(t, str) for t in value)


def _edge_ids(edges, csc, num_src: int, num_dst: int, name: str, where: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Seed edges `edges` ([2, E] source and destination ids below `num_src` / `num_dst`; None: every edge of
    `csc`, a CSCGraph or TypedCSC) as two int64 tensors; errors name the argument `name` and the graph as `where`."""
    if edges is None:
        edges = edge_list(csc.indptr, csc.indices, None if csc.positional_ids else csc.checked_e_id())
    t = edges if isinstance(edges, torch.Tensor) else torch.as_tensor(np.asarray(edges))
    if t.dtype == torch.bool or t.dtype.is_floating_point or t.dtype.is_complex:
        raise TypeError(f"{name} has dtype {t.dtype}; accepted: an integer [2, num_edges] tensor of (source, "
                        "destination) node ids")
    if t.dim() != 2 or t.shape[0] != 2:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; accepted: [2, num_edges] (source, destination) ids")
    t = t.to(torch.int64)
    for row, (end, n) in enumerate((("source", num_src), ("destination", num_dst))):
        ids = t[row]
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise IndexError(f"{name}[{row}] contains {end} node {bad}, outside [0, {n}) of {where}")
    return t[0].contiguous(), t[1].contiguous()


def _per_input(value, n: int, argname: str, accepted: str, rows: bool = False) -> Optional[torch.Tensor]:
    """`value` (None, or one entry per of the loader's `n` inputs: shape ``(n,)``, or ``(n, ...)`` with `rows`) as
    a tensor; ValueError naming `argname`, its shape and the `accepted` one otherwise."""
    if value is None:
        return None
    t = torch.as_tensor(value)
    if (t.shape[:1] if rows else t.shape) != (n,):
        raise ValueError(f"{argname} has shape {tuple(t.shape)}; accepted: {accepted}, shape ({n},"
                         f"{' ...' if rows else ''})")
    return t


def _input_time(input_time, seeds: torch.Tensor) -> Optional[torch.Tensor]:
    """NeighborLoader's `input_time`: one time per input node (a CPU tensor), or None."""
    if input_time is None:
        return None
    t = torch.as_tensor(input_time)
    if t.shape != seeds.shape or t.dtype == torch.bool or t.dtype.is_complex:
        raise ValueError(f"input_time has shape {tuple(t.shape)}; accepted: one time per input node, shape "
                         f"{tuple(seeds.shape)}, of an integer or float dtype (input_time's: {t.dtype})")
    return _common.host_table(t, "input_time").contiguous()


def _split(store, name: Callable[[str], str], num_nodes: Optional[int], num_edges: Optional[int],
           stored: tuple = (EncodedTable,)) -> tuple[dict, dict, dict, dict]:
    """A PyG store's node tables (with `num_nodes`: PyG's node attributes, `stored` tables), edge tables
    (with `num_edges`) as CPU tensors or numpy views, the other attributes, kept as given, and the dimension
    PyG selects each table along where it is not 0 (an index, e.g. a stored ``edge_label_index`` [2, L]:
    its table has that dimension first, `_cat_back` restores it); `name` gives an attribute's name in messages."""
    node, edge, other, dims = {}, {}, {}, {}
    # PyG counts a store's nodes from its tensors; tables it cannot read (stores, sources) hide the count
    # from it, and then a tensor with one row per node is a node attribute by PyG's own rule (is_node_attr)
    hidden = num_nodes is not None and "num_nodes" not in store and any(isinstance(v, stored) for v in store.values())
    for key, value in store.items():
        if key in ("edge_index", "num_nodes", ADJ_T):
            continue
        table = isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim > 0
        dim = _cat_dim(store, key, value) if table else 0
        table = table and dim is not None  # PyG selects a sparse adj along no one dimension: graph-level
        count = value.shape[dim] if table else None  # the nodes (edges) PyG selects along `dim`
        per_node = hidden and table and count == num_nodes and (num_nodes != num_edges or "edge" not in key)
        if table and dim:
            value = torch.as_tensor(value).movedim(dim, 0)
        if num_nodes is not None and (isinstance(value, stored) or table and (
                key in _common.NODE_KEYS or per_node or store.is_node_attr(key))):
            # node features by name (x, pos) whose row count does not match num_nodes would
            # otherwise be dropped from every batch without a word
            check_node_table(name(key), value, num_nodes)
            node[key] = value if isinstance(value, stored) else _common.host_rows(value, name(key))
        elif num_nodes is not None and isinstance(value, (list, tuple)) and len(value) == num_nodes:
            raise TypeError(f"{name(key)} is a {type(value).__name__} of one entry per node; the loader "
                            "gathers node attributes from tensors or numpy arrays only")
        elif num_edges is not None and table and store.is_edge_attr(key) and count == num_edges:
            edge[key] = _common.host_rows(value, name(key))
        else:
            other[key] = store[key]  # graph-level: every batch keeps it unchanged, as PyG's filter_data
            continue
        if dim:
            dims[key] = dim
    return node, edge, other, dims


def _cat_dim(store, key: str, value) -> Optional[int]:
    """The dimension PyG's filter_data selects `value` (attribute `key` of `store`) along: its ``__cat_dim__``
    (-1 for an index or face), made non-negative; None where that is not one dimension (a sparse adj)."""
    storage = store._store if isinstance(store, Data) else store
    dim = storage._parent().__cat_dim__(key, value, storage)
    return dim % value.ndim if isinstance(dim, int) else None


def _cat_back(value: torch.Tensor, dim: Optional[int]) -> torch.Tensor:
    """A gathered table of an attribute PyG selects along `dim` (`_split`'s dims), in the attribute's layout."""
    return value if not dim else value.movedim(0, dim).contiguous()


def _edge_weight(data, weight_attr: Optional[str], num_edges: int) -> Optional[torch.Tensor]:
    """The edge weights `weight_attr` names (one per edge), or None."""
    if weight_attr is None:
        return None
    if not isinstance(weight_attr, str):
        raise TypeError(f"weight_attr must be None or the name of an edge attribute, got {weight_attr!r}")
    value = data[weight_attr] if isinstance(data, Data) and weight_attr in data else None
    if not isinstance(value, (torch.Tensor, np.ndarray)) or tuple(value.shape) != (num_edges,):
        raise ValueError(f"weight_attr={weight_attr!r} names no edge attribute of shape ({num_edges},) in data; "
                         "accepted: the name of a 1-d tensor with one weight per edge")
    return torch.as_tensor(value)


def _times(data, time_attr: Optional[str], num_nodes: int, num_edges: int, node_attrs: dict):
    """(node times, edge times) that `time_attr` names (one of them, as PyG decides), or (None, None); for
    (FeatureStore, GraphStore) data a node attribute of the feature store (`node_attrs`)."""
    if time_attr is None:
        return None, None
    if not isinstance(time_attr, str):
        raise TypeError(f"time_attr must be None or the name of a node or edge attribute, got {time_attr!r}")
    value = data[time_attr] if isinstance(data, Data) and time_attr in data else None
    if is_store_pair(data):
        value = node_attrs.get(time_attr)
        if isinstance(value, torch.Tensor) and value.shape == (num_nodes,):
            return value, None
    elif isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim == 1:
        if data.is_node_attr(time_attr) and value.shape[0] == num_nodes:
            return torch.as_tensor(value), None
        if data.is_edge_attr(time_attr) and value.shape[0] == num_edges:
            return None, torch.as_tensor(value)
    raise ValueError(f"time_attr={time_attr!r} names neither a node-level ({num_nodes},) nor an edge-level "
                     f"({num_edges},) attribute of data; accepted: the name of one-dimensional times")


def _graph_and_attrs(data) -> tuple[CSCGraph, dict, dict, dict, dict]:
    """The graph to sample from; node- and edge-level attributes (on the CPU; tensors contiguous,
    numpy arrays as views); graph-level attributes (everything else, kept as given); `_split`'s dims."""
    if is_store_pair(data):
        stores = read_stores(data)
        csc = stores.csc.get(None)
        num_nodes = stores.num_nodes.get(None, 0)
        graph = CSCGraph.from_edge_index(torch.zeros((2, 0), dtype=torch.int64), num_nodes) if csc is None else \
            CSCGraph(csc.indptr, csc.indices, csc.e_id)
        return graph, stores.features.get(None, {}), {}, {}, {}
    if isinstance(data, tuple):
        if len(data) != 2 or not isinstance(data[1], CSCGraph) or not hasattr(data[0], "items"):
            raise TypeError("data as a tuple must be (features: dict of node attributes, graph: CSCGraph), "
                            f"got {tuple(type(d).__name__ for d in data)}")
        graph, node = data[1], {}
        for key, value in data[0].items():
            _common.host_table(value, f"features[{key!r}]", graph.num_nodes,
                               accepted=(torch.Tensor, EncodedTable, FeatureSource),
                               what="a tensor or an EncodedTable (or a FeatureSource: ibp_graph.pipeline.sources)")
            node[key] = value if isinstance(value, (EncodedTable, FeatureSource)) else value.contiguous()
        return graph, node, {}, {}, {}
    if not isinstance(data, Data):
        raise TypeError(f"data must be a torch_geometric.data.Data or HeteroData, a (features, CSCGraph) "
                        "tuple, per-type (features, {edge type: TypedCSC}[, num_nodes]) or a (FeatureStore, "
                        f"GraphStore) pair, got {type(data).__name__}")
    if data.num_nodes is None:
        raise ValueError("data.num_nodes is None and cannot be inferred (no x, pos or edge_index); "
                         "accepted: a Data with node features or num_nodes set")
    num_nodes, edge_index, edge = int(data.num_nodes), data.edge_index, {}
    if edge_index is None and ADJ_T in data:  # PyG's to_csc reads adj_t's CSR as the graph's CSC
        indptr, indices, edge[ADJ_T] = _common.read_adj_t(data.adj_t, num_nodes, num_nodes, "data.adj_t")
        num_edges = int(indices.shape[0])
        try:  # edge ids: CSC positions
            graph = CSCGraph(indptr, indices.astype(index_dtype(num_nodes)), None)
        except (TypeError, ValueError) as err:
            raise type(err)(f"data.adj_t: {err}") from None
    else:  # without edges (PyG's to_csc): batches hold the seeds only
        edge_index = torch.zeros((2, 0), dtype=torch.int64) if edge_index is None else edge_index
        num_edges = int(edge_index.shape[1])
        graph = CSCGraph.from_edge_index(edge_index, num_nodes)
    node, more, other, dims = _split(data, "data.{}".format, num_nodes, num_edges, (EncodedTable, FeatureSource))
    return graph, node, {**edge, **more}, other, dims


class _HeteroGraph:
    """What the loader reads from a heterogeneous input: node counts, a TypedCSC per edge type (in-edges in
    time order for temporal sampling by `time_attr`), the edge weights `weight_attr` names, the node and
    edge tables the workers gather (per type, as CPU tensors or views), everything else as given. For
    per-type tables, `graph` orders the edge types sampled and `num_nodes`, given, orders the node types.
    `counts`: node counts known already (a type whose attributes were deleted since)."""

    def __init__(self, data: Any, time_attr: Optional[str] = None, weight_attr: Optional[str] = None,
                 counts: Optional[Mapping[str, int]] = None):
        self.num_nodes: dict[str, int] = {}
        self.num_nodes_set: set = set()
        self.node_attrs: dict[str, dict] = {}
        self.node_other: dict[str, dict] = {}
        self.csc: dict[EdgeType, TypedCSC] = {}
        self.edge_attrs: dict[EdgeType, dict] = {}
        self.edge_other: dict[EdgeType, dict] = {}
        self.graph_attrs: dict = {}
        self.dims: dict = {}  # per node or edge type, _split's dims
        if isinstance(data, HeteroData):
            self._read_hetero_data(data, dict(counts or {}))
        elif is_store_pair(data):
            self._read_stores(read_stores(data))
        elif isinstance(data, tuple) and len(data) in (2, 3) and isinstance(data[1], Mapping):
            self._read_tables(*data)
        else:
            raise TypeError(f"data must be a torch_geometric.data.HeteroData, a (FeatureStore, GraphStore) pair or "
                            f"(features, {{edge type: TypedCSC}}[, num_nodes]), got {type(data).__name__}")
        self.node_types, self.edge_types = list(self.num_nodes), list(self.csc)
        self.node_time, self.edge_time = _hetero_times(self, time_attr)
        for e, csc in self.csc.items():  # temporal edge types: each destination's in-edges in time order
            if self.node_time is not None and e[0] in self.node_time:
                self.csc[e] = sorted_by_time(csc, self.node_time[e[0]][csc.indices])
            elif self.edge_time is not None and e in self.edge_time:
                self.csc[e] = sorted_by_time(csc, csc.in_csc_order(self.edge_time[e]))
        self.weight = _hetero_weights(self, weight_attr)
        names = [node_name(t, a) for t in self.node_types for a in {**self.node_attrs[t], "n_id": None}]
        names += [edge_name(e, a) for e in self.edge_types for a in {**self.edge_attrs[e], "e_id": None}]
        if len(set(names)) != len(names):
            raise ValueError(f"node and edge type names {self.node_types} / {self.edge_types} give two "
                             "attributes the same flat name; accepted: type names that do not contain "
                             "'.' or '__'")

    def _edge_type(self, e, csc: TypedCSC, attrs: Optional[dict] = None, other: Optional[dict] = None) -> None:
        self.csc[e], self.edge_attrs[e], self.edge_other[e] = csc, attrs or {}, other or {}

    def _read_hetero_data(self, data: HeteroData, counts: dict) -> None:
        node_types, edge_types = data.metadata()
        self.num_nodes_set = {t for t in node_types if "num_nodes" in data[t]}
        for t in node_types:
            store = data[t]
            n = _num_nodes(store, counts.get(t))
            if n is None:
                raise ValueError(f"data[{t!r}].num_nodes is None and cannot be inferred; accepted: node "
                                 "type stores with node attributes or num_nodes set")
            self.num_nodes[t] = n
            self.node_attrs[t], _, self.node_other[t], self.dims[t] = _split(
                store, f"data[{t!r}].{{}}".format, n, None, (EncodedTable, FeatureSource))
        for e in edge_types:
            store, (src, _, dst) = data[e], e
            edge = {}
            if "edge_index" not in store and ADJ_T not in store:
                raise NotImplementedError(f"data[{e!r}] has no edge_index nor adj_t (keys {list(store.keys())}); "
                                          "accepted: edge types given as edge_index or adj_t, or the graph as "
                                          "per-type tables (features, {edge type: TypedCSC}[, num_nodes])")
            by_adj_t = "edge_index" not in store  # PyG's to_csc: adj_t's CSR is the type's CSC
            try:
                if by_adj_t:
                    indptr, indices, edge[ADJ_T] = _common.read_adj_t(
                        store.adj_t, self.num_nodes[src], self.num_nodes[dst], f"data[{e!r}].adj_t")
                    csc = TypedCSC(indptr, indices.astype(index_dtype(self.num_nodes[src])), None,  # ids: positions
                                   self.num_nodes[src])
                else:
                    ei = store.edge_index
                    csc = TypedCSC.from_edge_index(torch.from_numpy(ei) if isinstance(ei, np.ndarray) else ei,
                                                   self.num_nodes[src], self.num_nodes[dst])
            except (TypeError, ValueError, IndexError) as err:
                raise type(err)(f"data[{e!r}].{ADJ_T if by_adj_t else 'edge_index'}: {err}") from None
            _, attrs, other, self.dims[e] = _split(store, f"data[{e!r}].{{}}".format, None, csc.num_edges)
            self._edge_type(e, csc, {**edge, **attrs}, other)
        self.graph_attrs = dict(data._global_store.items())

    def _tables(self, t: str, n: int, items, where: str) -> None:
        """Node type `t` of `n` nodes given as tables `items` (feature store or per-type tables)."""
        self.num_nodes[t], self.node_attrs[t], self.node_other[t] = n, {}, {}
        for key, value in items:
            name = f"{where}[{t!r}][{key!r}]"
            if isinstance(value, (EncodedTable, FeatureSource)) or \
                    isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim > 0:
                check_node_table(name, value, n)
                self.node_attrs[t][key] = value if isinstance(value, (EncodedTable, FeatureSource)) \
                    else _common.host_rows(value, name)
            elif isinstance(value, (list, tuple)) and len(value) == n:
                raise TypeError(f"{name} is a {type(value).__name__} of one entry per node; the "
                                "loader gathers node attributes from tensors or numpy arrays only")
            else:
                raise TypeError(f"{name} is a {type(value).__name__}; accepted: a tensor, numpy array, "
                                "EncodedTable or FeatureSource with one row per node")

    def _read_stores(self, stores) -> None:
        """PyG's filter_custom_hetero_store: the feature store's node attributes, num_nodes where a type has one."""
        for t, n in stores.num_nodes.items():
            self._tables(t, n, stores.features.get(t, {}).items(), "feature_store")
        self.num_nodes_set = {t for t in stores.num_nodes if stores.features.get(t)}
        for e, csc in stores.csc.items():
            self._edge_type(e, csc)

    def _read_tables(self, features, graph, num_nodes=None) -> None:
        if not isinstance(features, Mapping) or not all(isinstance(v, Mapping) for v in features.values()):
            raise TypeError(f"data[0] (features) must map node types to {{attr: table}} dicts, got "
                            f"{type(features).__name__}")
        for e, csc in graph.items():
            if not (isinstance(e, tuple) and len(e) == 3) or not isinstance(csc, TypedCSC):
                raise TypeError(f"data[1] (graph) must map (src, rel, dst) edge types to TypedCSCs, got "
                                f"{e!r}: {type(csc).__name__}")
        counts: dict = {}
        sources = [(t, int(v.shape[0]), f"features[{t!r}][{k!r}]") for t, attrs in features.items()
                   for k, v in attrs.items() if getattr(v, "shape", None)]
        sources += [(t, n, f"graph[{e!r}]") for e, csc in graph.items()
                    for t, n in ((e[0], csc.num_src), (e[2], csc.num_dst))]
        if num_nodes is not None:
            if not isinstance(num_nodes, Mapping):
                raise TypeError(f"data[2] (num_nodes) must map node types to counts, got {type(num_nodes).__name__}")
            for t, n in num_nodes.items():
                if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
                    raise ValueError(f"num_nodes[{t!r}]={n!r} is not accepted; use an int >= 0")
                counts[t] = int(n)
            self.num_nodes_set = set(counts)
        for t, n, where in sources:
            if t not in counts and num_nodes is not None:
                raise ValueError(f"{where} names node type {t!r}, which num_nodes lacks; accepted: num_nodes "
                                 f"naming every node type ({list(counts)})")
            if counts.setdefault(t, n) != n:
                raise ValueError(f"{where} gives node type {t!r} {n} nodes; elsewhere it has {counts[t]}: "
                                 "accepted: one count per node type")
        for t, n in counts.items():
            self._tables(t, n, features.get(t, {}).items(), "features")
        for e, csc in graph.items():
            self._edge_type(e, csc)

    def gathered(self, t, attr: str, value: torch.Tensor) -> torch.Tensor:
        """The batch's `attr` of node or edge type `t`, gathered as `value`, in the attribute's layout."""
        return _cat_back(value, self.dims.get(t, {}).get(attr))

    def flat_tables(self) -> tuple[dict, dict]:
        """Node and edge attribute tables under their flat names (pipeline.plans.node_name / edge_name)."""
        nodes = {node_name(t, a): v for t, attrs in self.node_attrs.items() for a, v in attrs.items()}
        edges = {edge_name(e, a): v for e, attrs in self.edge_attrs.items() for a, v in attrs.items()}
        return nodes, edges


def _num_nodes(store, known: Optional[int]) -> Optional[int]:
    """A node type store's node count: PyG's, else the rows of a table PyG cannot read (a store, a source),
    else `known`."""
    tables = [v for v in store.values() if isinstance(v, (EncodedTable, FeatureSource))]
    if "num_nodes" not in store and tables:
        return int(tables[0].shape[0])
    with warnings.catch_warnings():  # PyG warns that it cannot infer the count of a store without tensors
        warnings.simplefilter("ignore")
        n = store.num_nodes
    return known if n is None else int(n)


def _hetero_weights(graph: _HeteroGraph, weight_attr: Optional[str]) -> Optional[dict]:
    """The edge weights `weight_attr` names, per edge type that has them (PyG's ``data.collect``), or None."""
    if weight_attr is None:
        return None
    if not isinstance(weight_attr, str):
        raise TypeError(f"weight_attr={weight_attr!r} is not accepted; use None or the name of an edge attribute")
    out = {e: attrs[weight_attr] for e, attrs in graph.edge_attrs.items() if weight_attr in attrs}
    if not out:
        raise ValueError(f"weight_attr={weight_attr!r} is an attribute of no edge type (edge types "
                         f"{graph.edge_types}); accepted: the name of an edge attribute with one weight per edge")
    return out


def _hetero_times(graph: _HeteroGraph, time_attr: Optional[str]):
    """(node times per node type, edge times per edge type) of `time_attr`, as numpy arrays; one of
    them None (PyG: a time attribute is node-level or edge-level), both None without `time_attr`."""
    if time_attr is None:
        return None, None
    if not isinstance(time_attr, str):
        raise TypeError(f"time_attr={time_attr!r} is not accepted; use None or an attribute name")

    def arr(value, argname):
        return _common.host_table(value, argname).numpy() if isinstance(value, torch.Tensor) else np.asarray(value)

    nodes = {t: arr(a[time_attr], f"data[{t!r}].{time_attr}") for t, a in graph.node_attrs.items() if time_attr in a}
    edges = {e: arr(a[time_attr], f"data[{e!r}].{time_attr}") for e, a in graph.edge_attrs.items() if time_attr in a}
    if nodes and edges:
        raise ValueError(f"time_attr={time_attr!r} holds both node-level and edge-level times; accepted: "
                         "an attribute of node types or of edge types")
    if not nodes and not edges:
        raise ValueError(f"time_attr={time_attr!r} is neither a node-level nor an edge-level attribute of "
                         "the graph")
    return (nodes, None) if nodes else (None, edges)
