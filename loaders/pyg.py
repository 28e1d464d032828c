"""CompressedNeighborLoader: PyG's NeighborLoader, with node features compressed on the way to the GPU."""
from __future__ import annotations

import warnings
from typing import Any, Callable, Iterator, List, Optional, Union

import numpy as np
import torch
from torch.utils.data import DataLoader

from ibp_graph.codec.base import Codec
from ibp_graph.data.store import EncodedTable
from ibp_graph.index_checks import check_node_table
from ibp_graph.loaders import _common
from ibp_graph.loaders._common import ADJ_T
from ibp_graph.loaders.pyg_stores import is_hetero_input, is_store_pair, read_stores
from ibp_graph.pipeline.batch import DecodedBatch, EncodedBatch
from ibp_graph.pipeline.codec_setup import CodecSpec
from ibp_graph.pipeline.features import check_features, plan_features
from ibp_graph.pipeline.requests import BatchRequest, BatchRequests, DrawnRequests
from ibp_graph.pipeline.sources import FeatureSource
from ibp_graph.pipeline.plans import NeighborPlanner
from ibp_graph.pipeline.producer import BatchProducer
from ibp_graph.sampling.graph import CSCGraph, index_dtype
from ibp_graph.sampling.neighbor import SUBGRAPH_TYPES, NeighborSampler

try:
    from torch_geometric.data import Data, HeteroData
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.loader.base import DataLoaderIterator
    from torch_geometric.loader.utils import infer_filter_per_worker
    from torch_geometric.sampler import HeteroSamplerOutput as PyGHeteroSamplerOutput
    from torch_geometric.sampler import NodeSamplerInput
    from torch_geometric.sampler import SamplerOutput as PyGSamplerOutput
except ImportError as e:  # pragma: no cover - exercised only without torch_geometric
    raise ImportError("ibp_graph.loaders.pyg needs torch_geometric: pip install 'ibp-graph[pyg]'") from e

class CompressedNeighborLoader(NeighborLoader):
    """Drop-in for torch_geometric.loader.NeighborLoader that sends compressed rows to the device.

    A subclass of PyG's NeighborLoader (its helpers accept it: ``BasicGNN.inference``,
    ``ZipLoader``, ``CachedLoader``, ``loader(index)``), built without pyg-lib: sampling,
    gathering and encoding happen in the DataLoader workers, decoding on `device` in this
    process, `prefetch` batches ahead.

    `data` is a homogeneous `Data` (node attributes may be tensors of any dtype, numpy
    arrays or np.memmaps, read through a view, or pre-encoded `EncodedTable`s; graph-level
    attributes are in every batch unchanged; a graph without edges gives batches of the
    seeds), or a tuple `(features, graph)`: a dict of node attributes (tensors or
    EncodedTables) and a `CSCGraph`, e.g. a prepared data set read from disk, or PyG's
    remote backend `(FeatureStore, GraphStore)` (loaders/pyg_stores.py: both stores are
    read once, here; batches carry what PyG's filter_custom_store puts in them: the
    feature store's node attributes, `num_nodes`, and no edge or graph-level attributes).
    A heterogeneous input (`HeteroData`, heterogeneous stores, or per-type tables with
    `TypedCSC`s) is read, sampled and made into HeteroData batches by loaders/pyg_hetero.py (its
    HeteroParts says how); the loader is the same class either way, a NeighborLoader, with the same
    options. As PyG, the loader reads `self.data` again at the start of each epoch (attribute names and
    object identity): an attribute deleted since is left out of the batches, one replaced or added is
    read as the constructor reads it; started persistent workers keep the copy they hold (as PyG's).
    A node attribute named ``n_id`` (an edge attribute ``e_id``) keeps the user's values, as in PyG.

    Arguments up to `directed` are NeighborLoader's, in its order, with PyG's semantics:
    `weight_attr` (weighted sampling), `subgraph_type` ("directional", "bidirectional",
    "induced"; `directed=False` means "induced", as PyG), `disjoint` (`batch.batch`), and
    `filter_per_worker` (either value gives the same batches: workers always sample, gather and
    encode, the main process decodes; it decides, as in PyG, whether `collate_fn(index)`
    returns the finished batch or the encoded one that `filter_fn` finishes), temporal
    sampling (`time_attr` naming node or edge times, `input_time`, `temporal_strategy`;
    disjoint, as PyG), `transform_sampler_output` (applied in the workers to PyG's SamplerOutput
    or HeteroSamplerOutput). A `neighbor_sampler` raises NotImplementedError naming it, and so do
    ``features="zero_copy"`` and a `device_cache` for a heterogeneous graph. `codec` (``"auto"``, the
    default: per group the smallest of IBP and EBP, or identity when neither gains;
    ``"ibp"``, ``"ebp"``, ``"identity"`` or a fitted codec object; a dtype no codec has
    travels as identity bytes, named in `codecs`), `device`, `prefetch` and
    `rank`/`world_size` (this process's share of every epoch's seeds; default: every seed,
    as PyG's loader, also under torch.distributed), `features` (where node features are read:
    ``"worker"``, ``"zero_copy"`` or ``"auto"``, pipeline.features) and `device_cache` (bytes,
    or a fraction of device memory, for compressed hot rows: pipeline.cache; 0: none) are
    ours. Remaining keyword arguments go to
    DataLoader (`batch_size`, `shuffle`, `drop_last`, `generator`, `sampler` or
    `batch_sampler` over input positions, `num_workers`, `persistent_workers`,
    `pin_memory`, `prefetch_factor`, `timeout`, ...); `dataset` and `collate_fn` are
    dropped, as PyG's NodeLoader does.

    Starting a loader makes numba's threading layer fork-safe unless the user chose one
    (ibp_graph.threads), and compiles the kernels once in this process (a warm-up encode
    per codec and one sampled batch), so that forked workers inherit them.
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
        **kwargs: Any,
    ):
        _common.start()
        if neighbor_sampler is not None:
            raise NotImplementedError(
                f"CompressedNeighborLoader does not support neighbor_sampler={neighbor_sampler!r}: sampling and "
                "gathering happen together in the workers, with the loader's own sampler (accepted: "
                "neighbor_sampler=None)")
        if input_time is not None and time_attr is None:
            raise ValueError("input_time is given but time_attr is None (as in PyG); accepted: input_time with "
                             "time_attr naming a node- or edge-level time attribute")
        subgraph_type = _subgraph_type(subgraph_type, directed)
        if filter_per_worker not in (None, True, False):
            raise ValueError(f"filter_per_worker={filter_per_worker!r} is not accepted; use None, True or False")
        kwargs.pop("dataset", None)  # as PyG's NodeLoader (PyTorch Lightning passes them)
        kwargs.pop("collate_fn", None)
        if kwargs.get("custom_cls") is not None:
            raise NotImplementedError(f"custom_cls={kwargs['custom_cls']!r} is not supported: it is for remote "
                                      "(FeatureStore, GraphStore) backends; accepted: None")
        kwargs.pop("custom_cls", None)
        input_id = kwargs.pop("input_id", None)
        batch_size = kwargs.pop("batch_size", 1)
        shuffle = kwargs.pop("shuffle", False)
        drop_last = kwargs.pop("drop_last", False)
        generator = kwargs.pop("generator", None)
        sampler = kwargs.pop("sampler", None)
        batch_sampler = kwargs.pop("batch_sampler", None)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} is not accepted; use an int >= 1")
        # NodeLoader's fields, which PyG's helpers read
        self.data = data
        self.transform = transform
        self.transform_sampler_output = transform_sampler_output
        self.filter_per_worker = infer_filter_per_worker(data) if filter_per_worker is None \
            else filter_per_worker
        self.custom_cls = None
        self.input_id = input_id
        self.subgraph_type = subgraph_type
        # the graph kind decides where PyG's NodeLoader.filter_fn branches: its parts read the input, plan
        # the batches and make them Data (here) or HeteroData (loaders/pyg_hetero.py)
        self.device = _common.loader_device(device)
        self._prefetch = prefetch
        self._codec_spec = codec
        self._is_hetero = isinstance(data, HeteroData) or is_hetero_input(data)
        sampling = dict(num_neighbors=num_neighbors, input_nodes=input_nodes, input_time=input_time,
                        replace=replace, subgraph_type=subgraph_type, disjoint=disjoint,
                        temporal_strategy=temporal_strategy, time_attr=time_attr, weight_attr=weight_attr,
                        input_id=input_id, post_sample=_post_sample(
                            self._is_hetero and subgraph_type == "bidirectional", transform_sampler_output))
        if self._is_hetero:
            from ibp_graph.loaders import pyg_hetero
            check_features(features)
            if features == "zero_copy" or device_cache not in (0, 0.0, None):
                raise NotImplementedError(
                    f"features={features!r}, device_cache={device_cache!r} are not supported for a HeteroData "
                    "yet; accepted: features='worker' or 'auto' (both gather in the workers) and device_cache=0")
            self._kind = pyg_hetero.HeteroParts(self, data, **sampling)
        else:
            self._kind = _HomoParts(self, data, features=features, device_cache=device_cache, **sampling)
        seeds = self._kind.seeds
        self.requests = _requests(seeds.numel(), batch_size, shuffle=shuffle, drop_last=drop_last,
                                  generator=generator, rank=rank, world_size=world_size,
                                  sampler=sampler, batch_sampler=batch_sampler)
        self._stage, self.stats = _common.decode_stage(self._codecs, self.device, prefetch, self.features)
        _common.warm_sampler(self.node_sampler, seeds, kwargs.get("num_workers", 0), seed_time=self._kind.seed_time,
                             input_type=getattr(self, "input_type", None))
        self._producer = producer = BatchProducer(self._kind.planner(), self._codecs)
        self._seen = _snapshot(data)
        kwargs.setdefault("pin_memory", self.device.type == "cuda")
        if kwargs.get("num_workers", 0) == 0:
            kwargs.pop("persistent_workers", None) if not kwargs.get("persistent_workers") else None
        # DataLoader's, not NodeLoader's __init__ (which builds PyG's sampler input and needs pyg-lib)
        DataLoader.__init__(self, producer, batch_size=None, sampler=self.requests,
                            collate_fn=self.collate_fn, **kwargs)

    def set_epoch(self, epoch: int) -> None:
        """Distributed runs: a new shuffle of the input nodes, the same on every rank."""
        self.requests.set_epoch(epoch)

    @property
    def codecs(self) -> dict[str, Codec]:
        """The codec of each group of a batch, by the group's printed name (as in `stats`)."""
        return _common.by_name(self._codecs)

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
        """PyG's: an encoded batch decoded on `device` and made NeighborLoader's Data or HeteroData."""
        if self.device.type == "cuda" and torch.utils.data.get_worker_info() is not None:
            raise RuntimeError(
                "CompressedNeighborLoader.filter_fn runs in a DataLoader worker (e.g. ZipLoader with "
                f"filter_per_worker=True and num_workers > 0) but device={str(self.device)!r} cannot decode in a "
                "forked worker; accepted: filter_per_worker=False (decode in the main process) or device='cpu'")
        if self._stage is None:  # unpickled in a worker process
            self._stage = _common.decode_stage(self._codecs, self.device, self._prefetch, self.features)[0]
        return self._finish(next(iter(self._stage(iter([out])))))

    def _get_iterator(self):
        # torch's iterator of encoded batches (decoding follows in __iter__); PyG's wrapper around
        # it when filter_per_worker is False, as NodeLoader (the batches are the same either way)
        it = DataLoader._get_iterator(self)
        return it if self.filter_per_worker else DataLoaderIterator(it, _identity)

    def __iter__(self) -> Iterator[Union[Data, HeteroData]]:
        self._read_data_again()
        it = DataLoader.__iter__(self)
        batches = _common.name_worker_deaths(it, "CompressedNeighborLoader", "sampling, gathering or encoding",
                                             lambda: _common.worker_processes(getattr(it, "iterator", it)))
        for batch in self._stage(batches):
            yield self._finish(batch)

    def _read_data_again(self) -> None:
        """PyG reads `self.data` at every batch: an attribute deleted, replaced or added since the last
        epoch (by name and object identity, a cheap check) is read again, as the constructor reads it
        (codecs set up for new groups), and a deleted one leaves the batches. Persistent workers that
        have started keep their copy (as PyG's), and so does this loader then."""
        seen = _snapshot(self.data)
        if seen == self._seen or seen is None or getattr(self, "_iterator", None) is not None:
            return
        codecs = self._kind.read_again(self.data)
        self._codecs = {k: self._codecs.get(k, c) for k, c in codecs.items()}  # unchanged groups keep theirs
        self._producer.codecs = dict(self._codecs)
        self._producer.planner = self._kind.planner()
        self._stage, self.stats = _common.decode_stage(self._codecs, self.device, self._prefetch, self.features,
                                                       stats=self.stats)
        self._seen = seen

    def _finish(self, batch: DecodedBatch) -> Union[Data, HeteroData]:
        """The batch as PyG's filter_fn makes it for the graph kind, then `transform`."""
        data = self._kind.to_batch(batch)
        return self.transform(data) if self.transform is not None else data

    def __getstate__(self) -> dict:
        # what a spawned worker needs (collate_fn is a method: pickling it pickles the loader);
        # the decode stage (a CUDA stream) and a live iterator stay here
        state = dict(self.__dict__)
        state["_stage"] = None
        state["_iterator"] = None
        return state

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"  # PyG's NodeLoader repr

    def describe(self) -> str:
        """What this loader samples and how it sends each group (fan-outs, codecs, device, features)."""
        return (f"{type(self).__name__}({getattr(self._kind, 'prefix', '')}"
                f"num_neighbors={self.node_sampler.num_neighbors}, "
                f"batches={len(self)}, codecs={ {k: c.name for k, c in self.codecs.items()} }, "
                f"device={self.device}, {self._kind.describe()})")


class _HomoParts:
    """The homogeneous side of the loader: its graph, sampler, inputs, feature plan and codecs (set on
    the loader as NeighborLoader's fields), its batch plans and its batches' Data."""

    def __init__(self, loader: "CompressedNeighborLoader", data, *, num_neighbors, input_nodes, input_time,
                 replace, subgraph_type, disjoint, temporal_strategy, time_attr, weight_attr, input_id,
                 post_sample, features, device_cache):
        if is_store_pair(data) and weight_attr is not None:
            raise NotImplementedError(
                f"weight_attr={weight_attr!r} with (FeatureStore, GraphStore) data is not supported (nor by PyG); "
                "accepted: None, or the graph as a Data")
        self.loader = loader
        graph, node_attrs, self.edge_attrs, self.graph_attrs = _graph_and_attrs(data)
        # PyG sets a batch's num_nodes when the graph's was set, and for a feature store with attributes
        self.set_num_nodes = (isinstance(data, Data) and "num_nodes" in data) or (
            is_store_pair(data) and bool(node_attrs))
        num_nodes = graph.num_nodes
        loader.graph = graph
        weight = _edge_weight(data, weight_attr, graph.num_edges)
        node_time, edge_time = _times(data, time_attr, num_nodes, graph.num_edges, node_attrs)
        loader.node_sampler = NeighborSampler(graph, num_neighbors, replace=replace, weight=weight,
                                              subgraph_type=subgraph_type, disjoint=disjoint,
                                              node_time=node_time, edge_time=edge_time,
                                              temporal_strategy=temporal_strategy)
        loader.input_nodes = input_nodes
        loader.input_time = input_time
        seeds = _input_nodes(input_nodes, num_nodes)
        # PyG reports input_id as node ids for a boolean mask, as positions for ids or None,
        # unless NodeLoader's input_id= gives one per seed
        mask_given = isinstance(input_nodes, torch.Tensor) and input_nodes.dtype == torch.bool
        if input_id is not None:
            input_id = torch.as_tensor(input_id)
            if input_id.shape != seeds.shape:
                raise ValueError(f"input_id has shape {tuple(input_id.shape)}; accepted: one id per input "
                                 f"node, shape {tuple(seeds.shape)}")
        elif mask_given:
            input_id = seeds
        if input_time is not None:
            input_time = torch.as_tensor(input_time)
            if input_time.shape != seeds.shape:
                raise ValueError(f"input_time has shape {tuple(input_time.shape)}; accepted: one time per input "
                                 f"node, shape {tuple(seeds.shape)}")
        loader.input_data = NodeSamplerInput(input_id=input_id, node=seeds, time=input_time)
        self.seeds, self.seed_time = seeds, input_time
        self.post_sample = post_sample
        self.feature_options = dict(features=features, device_cache=device_cache)
        loader._codecs = self._setup(node_attrs)

    def _setup(self, node_attrs: dict) -> dict:
        """The feature plan of these node attributes (set on the loader) and the codecs of the batches."""
        loader, graph = self.loader, self.loader.graph
        loader.features = plan_features(node_attrs, device=loader.device, indices=graph.indices,
                                        codec=loader._codec_spec, **self.feature_options)
        return _common.setup_codecs(loader.features.codec_attrs, self.edge_attrs, num_nodes=graph.num_nodes,
                                    num_edges=graph.num_edges, codec=loader._codec_spec, device=loader.device)

    def read_again(self, data: Data) -> dict:
        """The attributes of `data` read as the constructor reads them (the graph stays); the codecs."""
        graph = self.loader.graph
        node, edge, self.graph_attrs = _data_attrs(data, graph.num_nodes, graph.num_edges)
        self.edge_attrs = {**({ADJ_T: self.edge_attrs[ADJ_T]} if ADJ_T in self.edge_attrs else {}), **edge}
        self.set_num_nodes = "num_nodes" in data
        return self._setup(node)

    def planner(self) -> NeighborPlanner:
        loader = self.loader
        return NeighborPlanner(loader.node_sampler, self.seeds, loader.features.node_attrs,
                               self.edge_attrs, input_ids=loader.input_data.input_id, input_time=self.seed_time,
                               post_sample=self.post_sample)

    def to_batch(self, batch: DecodedBatch) -> Data:
        """NeighborLoader's Data: the named tensors, and its fields from the batch's meta."""
        tensors = dict(batch)
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

    def describe(self) -> str:
        return f"features={self.loader.features.describe()}"


class _PostSample:
    """In the workers, after sampling: PyG's bidirectional subgraph (heterogeneous: the homogeneous sampler
    makes its own), then `transform_sampler_output`, both on PyG's (Hetero)SamplerOutput, as NeighborLoader."""

    def __init__(self, bidirectional: bool, transform: Optional[Callable]):
        self.bidirectional = bidirectional
        self.transform = transform

    def __call__(self, out):
        fields = dict(node=out.node, row=out.row, col=out.col, edge=out.edge, batch=out.batch,
                      num_sampled_nodes=out.num_sampled_nodes, num_sampled_edges=out.num_sampled_edges)
        pyg = (PyGHeteroSamplerOutput if isinstance(out.node, dict) else PyGSamplerOutput)(**fields)
        if self.bidirectional:
            pyg = pyg.to_bidirectional(keep_orig_edges=False)
        if self.transform is not None:
            pyg = self.transform(pyg)
        return type(out)(**{k: getattr(pyg, k) for k in fields})


def _post_sample(bidirectional: bool, transform: Optional[Callable]) -> Optional[_PostSample]:
    if not bidirectional and transform is None:
        return None
    return _PostSample(bidirectional, transform)


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


def _input_nodes(input_nodes, num_nodes: int) -> torch.Tensor:
    """Seed node ids as int64: all nodes for None, the True positions of a boolean mask."""
    if input_nodes is None:
        return torch.arange(num_nodes)
    if isinstance(input_nodes, (tuple, str)):
        raise NotImplementedError(f"input_nodes={input_nodes!r}: heterogeneous node types are not supported")
    t = torch.as_tensor(input_nodes)
    if t.dtype == torch.bool:
        if t.numel() != num_nodes:
            raise ValueError(f"input_nodes is a boolean mask of {t.numel()} entries; the graph has "
                             f"{num_nodes} nodes")
        return t.nonzero().view(-1)
    if t.dim() != 1 or t.dtype.is_floating_point:
        raise TypeError(f"input_nodes must be None, a boolean mask or a 1-d tensor of node ids, got "
                        f"dtype={t.dtype} shape={tuple(t.shape)}")
    t = t.to(torch.int64)
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= num_nodes):
        bad = int(t.min()) if int(t.min()) < 0 else int(t.max())
        raise IndexError(f"input_nodes contains node {bad}, outside [0, {num_nodes})")
    return t.contiguous()


def _graph_and_attrs(data) -> tuple[CSCGraph, dict, dict, dict]:
    """The graph to sample from; node- and edge-level attributes (on the CPU; tensors contiguous,
    numpy arrays as views); graph-level attributes (everything else, kept as given)."""
    if is_store_pair(data):
        stores = read_stores(data)
        csc = stores.csc.get(None)
        num_nodes = stores.num_nodes.get(None, 0)
        graph = CSCGraph.from_edge_index(torch.zeros((2, 0), dtype=torch.int64), num_nodes) if csc is None else \
            CSCGraph(csc.indptr, csc.indices, csc.e_id)
        return graph, stores.features.get(None, {}), {}, {}
    if isinstance(data, tuple):
        if len(data) != 2 or not isinstance(data[1], CSCGraph) or not hasattr(data[0], "items"):
            raise TypeError("data as a tuple must be (features: dict of node attributes, graph: CSCGraph), "
                            f"got {tuple(type(d).__name__ for d in data)}")
        graph = data[1]
        node = {}
        for key, value in data[0].items():
            _check_attr(f"features[{key!r}]", value, graph.num_nodes)
            node[key] = value if isinstance(value, (EncodedTable, FeatureSource)) else value.contiguous()
        return graph, node, {}, {}
    if not isinstance(data, Data):
        raise TypeError(f"data must be a torch_geometric.data.Data or HeteroData, a (features, CSCGraph) "
                        "tuple, per-type (features, {edge type: TypedCSC}[, num_nodes]) or a (FeatureStore, "
                        f"GraphStore) pair, got {type(data).__name__}")
    if data.num_nodes is None:
        raise ValueError("data.num_nodes is None and cannot be inferred (no x, pos or edge_index); "
                         "accepted: a Data with node features or num_nodes set")
    num_nodes = int(data.num_nodes)
    edge_index = data.edge_index
    edge = {}
    if edge_index is None and "adj_t" in data:  # PyG's to_csc reads adj_t's CSR as the graph's CSC
        indptr, indices, edge[ADJ_T] = _common.read_adj_t(data.adj_t, num_nodes, num_nodes, "data.adj_t")
        num_edges = int(indices.shape[0])
        graph = CSCGraph(indptr, indices.astype(index_dtype(num_nodes)),
                         np.arange(num_edges, dtype=index_dtype(num_edges)))
    else:
        if edge_index is None:  # PyG's to_csc: a graph without edges, whose batches hold the seeds only
            edge_index = torch.zeros((2, 0), dtype=torch.int64)
        num_edges = int(edge_index.shape[1])
        graph = CSCGraph.from_edge_index(edge_index, num_nodes)
    node, more, other = _data_attrs(data, num_nodes, num_edges)
    return graph, node, {**edge, **more}, other


def _data_attrs(data: Data, num_nodes: int, num_edges: int) -> tuple[dict, dict, dict]:
    """A Data's node- and edge-level attributes (CPU tensors, contiguous, or numpy views) and its
    graph-level ones (kept as given), as the loader reads them when built and after they change."""
    node, edge, other = {}, {}, {}
    for key, value in data.items():
        if key in ("edge_index", "num_nodes", ADJ_T):
            continue
        if isinstance(value, (EncodedTable, FeatureSource)):
            _check_attr(f"data.{key}", value, num_nodes)
            node[key] = value
            continue
        if isinstance(value, (list, tuple)) and len(value) == num_nodes:
            raise TypeError(f"data.{key} is a {type(value).__name__} of one entry per node; the loader "
                            "gathers node attributes from tensors or numpy arrays only")
        table = isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim > 0
        if table and (key in _common.NODE_KEYS or data.is_node_attr(key)):
            # node features by name (x, pos) whose row count does not match num_nodes would
            # otherwise be dropped from every batch without a word
            check_node_table(f"data.{key}", value, num_nodes)
            node[key] = _common.host_rows(value, f"data.{key}")
        elif table and data.is_edge_attr(key) and value.shape[0] == num_edges:
            edge[key] = _common.host_rows(value, f"data.{key}")
        else:
            other[key] = value  # graph-level: every batch keeps it unchanged, as PyG's filter_data
    return node, edge, other


def _check_attr(argname: str, value, num_nodes: int) -> None:
    """A node attribute must be a CPU tensor, an EncodedTable or a FeatureSource with one row per node."""
    _common.host_table(value, argname, num_nodes, accepted=(torch.Tensor, EncodedTable, FeatureSource),
                       what="a tensor or an EncodedTable (or a FeatureSource: ibp_graph.pipeline.sources)")
