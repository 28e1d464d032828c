"""CompressedNeighborLoader: PyG's NeighborLoader, with node features compressed on the way to the GPU."""
from __future__ import annotations

from typing import Any, Callable, Iterator, List, Optional, Union

import numpy as np
import torch
from torch.utils.data import DataLoader

from ibp_graph.codec.base import Codec
from ibp_graph.data.store import EncodedTable
from ibp_graph.index_checks import check_node_table
from ibp_graph.loaders import _common
from ibp_graph.pipeline.batch import DecodedBatch
from ibp_graph.pipeline.codec_setup import CodecSpec
from ibp_graph.pipeline.grouping import GroupKey
from ibp_graph.pipeline.requests import BatchRequests
from ibp_graph.pipeline.worker import BatchProducer
from ibp_graph.sampling.graph import CSCGraph
from ibp_graph.sampling.neighbor import NeighborSampler

try:
    from torch_geometric.data import Data
    from torch_geometric.loader.mixin import AffinityMixin, MultithreadingMixin
except ImportError as e:  # pragma: no cover - exercised only without torch_geometric
    raise ImportError("ibp_graph.loaders.pyg needs torch_geometric: pip install 'ibp-graph[pyg]'") from e

#: DataLoader arguments the loader sets itself.
_OWN_KWARGS = ("batch_size", "shuffle", "drop_last", "generator")
_REFUSED_KWARGS = ("sampler", "batch_sampler", "collate_fn")


class CompressedNeighborLoader(DataLoader, AffinityMixin, MultithreadingMixin):
    """Drop-in for torch_geometric.loader.NeighborLoader that sends compressed rows to the device.

    `data` is a homogeneous `Data` (node attributes may be tensors, numpy arrays or
    np.memmaps, read through a view, or pre-encoded `EncodedTable`s; graph-level attributes
    are in every batch unchanged; a graph without edges gives batches of the seeds), or a
    tuple `(features, graph)`: a dict of node attributes (tensors or EncodedTables) and a
    `CSCGraph`, e.g. a prepared data set read from disk. `enable_cpu_affinity` and
    `enable_multithreading` are PyG's (torch_geometric.loader.mixin).

    Arguments up to `directed` are NeighborLoader's, in its order; `codec` (``"auto"``, the
    default: per group the smallest of IBP and EBP, or identity when neither gains;
    ``"ibp"``, ``"ebp"``, ``"identity"`` or a fitted codec object), `device`, `prefetch`
    and `rank`/`world_size` (this process's share of every epoch's seeds; default
    torch.distributed's when initialised) are ours. Options NeighborLoader has but this loader cannot honour raise
    NotImplementedError naming them. Remaining keyword arguments go to DataLoader
    (`batch_size`, `shuffle`, `drop_last`, `num_workers`, `persistent_workers`,
    `pin_memory`, `prefetch_factor`, `timeout`, ...).

    Starting a loader makes numba's threading layer fork-safe unless the user chose one
    (ibp_graph.threads), and compiles the kernels once in this process (a warm-up encode
    per codec and one sampled batch), so that forked workers inherit them.
    """

    def __init__(
        self,
        data: Data,
        num_neighbors: List[int],
        input_nodes: Optional[torch.Tensor] = None,
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
        **kwargs: Any,
    ):
        _common.start()
        given = {"input_time": input_time, "subgraph_type": subgraph_type, "disjoint": disjoint,
                 "temporal_strategy": temporal_strategy, "time_attr": time_attr,
                 "weight_attr": weight_attr, "transform_sampler_output": transform_sampler_output,
                 "filter_per_worker": filter_per_worker, "neighbor_sampler": neighbor_sampler,
                 "directed": directed}
        honoured = {"input_time": None, "subgraph_type": "directional", "disjoint": False,
                    "temporal_strategy": "uniform", "time_attr": None, "weight_attr": None,
                    "transform_sampler_output": None, "neighbor_sampler": None, "directed": True}
        bad = [k for k, v in honoured.items()
               if getattr(given[k], "value", given[k]) != v and given[k] is not v]
        if filter_per_worker is False:
            bad.append("filter_per_worker")
        if bad:
            raise NotImplementedError(
                f"CompressedNeighborLoader does not support "
                f"{', '.join(f'{k}={given[k]!r}' for k in bad)}; it samples homogeneous graphs "
                "uniformly with the directional subgraph, filtering in the workers")
        for k in _REFUSED_KWARGS:
            if k in kwargs:
                raise NotImplementedError(f"{k}= is not supported: the loader builds its own batches "
                                          "(pass batch_size, shuffle, drop_last, generator)")
        graph, node_attrs, edge_attrs, self._graph_attrs = _graph_and_attrs(data)
        # PyG sets a batch's num_nodes when the graph's was set
        self._set_num_nodes = isinstance(data, Data) and "num_nodes" in data
        self.data = data

        batch_size = kwargs.pop("batch_size", 1)
        shuffle = kwargs.pop("shuffle", False)
        drop_last = kwargs.pop("drop_last", False)
        generator = kwargs.pop("generator", None)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} is not accepted; use an int >= 1")

        num_nodes = graph.num_nodes
        self.graph = graph
        self.node_sampler = NeighborSampler(self.graph, num_neighbors, replace=replace)
        self.input_nodes = _input_nodes(input_nodes, num_nodes)
        # PyG reports input_id as node ids for a boolean mask, as positions for ids or None
        mask_given = isinstance(input_nodes, torch.Tensor) and input_nodes.dtype == torch.bool
        self.device = _device(device)
        self.transform = transform
        self.requests = BatchRequests(self.input_nodes.numel(), batch_size, shuffle=shuffle,
                                      drop_last=drop_last, generator=generator, rank=rank,
                                      world_size=world_size)
        self._codecs: dict[GroupKey, Codec] = _common.setup_codecs(
            node_attrs, edge_attrs, num_nodes=num_nodes, num_edges=self.graph.num_edges, codec=codec,
            device=self.device)
        self._stage, self.stats = _common.decode_stage(self._codecs, self.device, prefetch)
        _common.warm_sampler(self.node_sampler, self.input_nodes, kwargs.get("num_workers", 0))
        producer = BatchProducer(self.node_sampler, self.input_nodes, node_attrs, edge_attrs, self._codecs,
                                 input_ids=self.input_nodes if mask_given else None)
        kwargs.setdefault("pin_memory", self.device.type == "cuda")
        if kwargs.get("num_workers", 0) == 0:
            kwargs.pop("persistent_workers", None) if not kwargs.get("persistent_workers") else None
        super().__init__(producer, batch_size=None, sampler=self.requests,
                         collate_fn=_identity, **kwargs)

    def set_epoch(self, epoch: int) -> None:
        """Distributed runs: a new shuffle of the input nodes, the same on every rank."""
        self.requests.set_epoch(epoch)

    @property
    def codecs(self) -> dict[str, Codec]:
        """The codec of each group of a batch, by the group's printed name (as in `stats`)."""
        return _common.by_name(self._codecs)

    def __iter__(self) -> Iterator[Data]:
        it = super().__iter__()
        batches = _common.name_worker_deaths(it, "CompressedNeighborLoader", "sampling, gathering or encoding",
                                             lambda: _common.worker_processes(it))
        for batch in self._stage(batches):
            yield self._to_data(batch)

    def _to_data(self, batch: DecodedBatch) -> Data:
        """NeighborLoader's Data: the named tensors, and its fields from the batch's meta."""
        data = Data(**{**self._graph_attrs, **batch})  # graph-level attributes as given (PyG's filter_data)
        if self._set_num_nodes:
            data.num_nodes = int(batch["n_id"].numel())
        data.batch_size = batch.meta["num_seeds"]
        data.num_sampled_nodes = batch.meta["nodes_per_hop"]
        data.num_sampled_edges = batch.meta["edges_per_hop"]
        return self.transform(data) if self.transform is not None else data

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_neighbors={self.node_sampler.num_neighbors}, "
                f"batches={len(self)}, codecs={ {k: c.name for k, c in self.codecs.items()} }, "
                f"device={self.device})")


def _identity(batch):
    return batch


def _device(device) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r} is not accepted; use 'cpu', 'cuda' or 'cuda:N'")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but torch sees no CUDA device; use device='cpu'")
    return dev


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


#: attributes that are node-level by their name in PyG, whatever their row count
_NODE_KEYS = ("x", "pos")


def _graph_and_attrs(data) -> tuple[CSCGraph, dict, dict, dict]:
    """The graph to sample from; node- and edge-level attributes (on the CPU; tensors contiguous,
    numpy arrays as views); graph-level attributes (everything else, kept as given)."""
    if isinstance(data, tuple):
        if len(data) != 2 or not isinstance(data[1], CSCGraph) or not hasattr(data[0], "items"):
            raise TypeError("data as a tuple must be (features: dict of node attributes, graph: CSCGraph), "
                            f"got {tuple(type(d).__name__ for d in data)}")
        graph = data[1]
        node = {}
        for key, value in data[0].items():
            _check_attr(f"features[{key!r}]", value, graph.num_nodes)
            node[key] = value if isinstance(value, EncodedTable) else value.contiguous()
        return graph, node, {}, {}
    if not isinstance(data, Data):
        raise TypeError(f"data must be a torch_geometric.data.Data (homogeneous graph) or a "
                        f"(features, CSCGraph) tuple, got {type(data).__name__}")
    if data.num_nodes is None:
        raise ValueError("data.num_nodes is None and cannot be inferred (no x, pos or edge_index); "
                         "accepted: a Data with node features or num_nodes set")
    num_nodes = int(data.num_nodes)
    edge_index = data.edge_index
    if edge_index is None:  # PyG's to_csc: a graph without edges, whose batches hold the seeds only
        edge_index = torch.zeros((2, 0), dtype=torch.int64)
    num_edges = int(edge_index.shape[1])
    graph = CSCGraph.from_edge_index(edge_index, num_nodes)
    node, edge, other = {}, {}, {}
    for key, value in data.items():
        if key in ("edge_index", "num_nodes"):
            continue
        if isinstance(value, EncodedTable):
            _check_attr(f"data.{key}", value, num_nodes)
            node[key] = value
            continue
        if isinstance(value, (list, tuple)) and len(value) == num_nodes:
            raise TypeError(f"data.{key} is a {type(value).__name__} of one entry per node; the loader "
                            "gathers node attributes from tensors or numpy arrays only")
        table = isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim > 0
        if table and (key in _NODE_KEYS or data.is_node_attr(key)):
            # node features by name (x, pos) whose row count does not match num_nodes would
            # otherwise be dropped from every batch without a word
            check_node_table(f"data.{key}", value, num_nodes)
            node[key] = _host_rows(value, f"data.{key}")
        elif table and data.is_edge_attr(key) and value.shape[0] == num_edges:
            edge[key] = _host_rows(value, f"data.{key}")
        else:
            other[key] = value  # graph-level: every batch keeps it unchanged, as PyG's filter_data
    return graph, node, edge, other


def _host_rows(value, argname: str) -> torch.Tensor:
    """A node or edge table the workers gather rows from: a CPU tensor (contiguous), or a view of a
    numpy array or np.memmap (never copied whole: contiguous() of a strided view would)."""
    if isinstance(value, np.ndarray):
        return _common.numpy_view(value, argname)
    return _common.host_table(value, argname).contiguous()


def _check_attr(argname: str, value, num_nodes: int) -> None:
    """A node attribute must be a CPU tensor or an EncodedTable with one row per node."""
    _common.host_table(value, argname, num_nodes, accepted=(torch.Tensor, EncodedTable),
                       what="a tensor or an EncodedTable")
