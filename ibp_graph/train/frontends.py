"""The training loop's front-ends: PyG (CompressedNeighborLoader, PyG's models), PyG on
heterogeneous data sets (HeteroData batches, HeteroSAGE) and DGL (CompressedDGLDataLoader,
DGL's GraphSAGE on blocks).

A front-end turns the prepared data set into loaders, builds the model and runs it on
one batch; the loop (train/loop.py) does everything else the same way for both. Every
loader factory takes ``tables``: ``{table: feature source}`` serving the data set's feature
tables instead of its own (``x``, or one per featured node type; `loader.features: sharded`
gives one ShardedSource per table, train/sharding.py), and ``build_model`` takes ``inputs``:
``{table: FeatureInput}`` (width and statistics) instead of reading them from the data set's
tables (a sharded run: from the shards' manifest; its data set is opened without them). Each
front-end imports its framework only when it is used, so the DGL one runs where
torch_geometric is not installed (.venv-dgl) and the PyG one where dgl is not.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping, Optional

import torch

from ..data.input_stats import FeatureInput
from ..data.prepared import PreparedDataset
from .config import FRAMEWORKS, ConfigError
from .models import HeteroSAGE, build_model, check_arch

#: build_model's `inputs`: {table: FeatureInput} (a sharded run's, from its shards), or None (from the data set).
Inputs = Optional[Mapping[str, FeatureInput]]
#: the codec label of a run with the framework's own, uncompressed loader (`--baseline`).
NATIVE = "native"

DGL_ENV = ("dgl 2.1 loads only with torch <= 2.2.1 and numpy < 2: run in the DGL environment that "
           "`make test-dgl` uses (`make venv-dgl` builds .venv-dgl; then .venv-dgl/bin/ibp-graph train ...)")


class PyG:
    """CompressedNeighborLoader batches (torch_geometric Data) into a PyG NodeClassifier."""

    name = "pyg"
    #: whether a training step may leave parameters without gradient (DistributedDataParallel's
    #: find_unused_parameters, a search of the autograd graph every step)
    find_unused_parameters = False

    #: PyG's own loader a baseline run would take (none here: see check_baseline).
    native_loader = "NeighborLoader"

    def check(self, cfg) -> None:
        """Refuse, before any data is loaded, what this front-end cannot run."""
        check_arch(self.name, cfg.model.arch)

    def check_baseline(self) -> None:
        """Refuse a baseline run (`--baseline`, codec NATIVE) before any data is loaded: it is DGL's only."""
        raise ConfigError(f"--baseline is not accepted with loader.framework='pyg': a baseline run with PyG's own "
                          f"{self.native_loader} is not available here (it needs pyg-lib or torch-sparse); use "
                          "loader.framework=dgl for --baseline (homogeneous and link data sets)")

    def check_device(self, device: torch.device) -> None:
        """Every device torch has is fine."""

    def prepare(self, ds: PreparedDataset) -> Any:
        """Nothing: the loader samples the prepared CSC graph itself."""
        return None

    def from_store(self, ds: PreparedDataset, codec: str, use_store: bool) -> bool:
        """Whether features come pre-encoded from the store or from the raw table.

        The store serves codec "auto" (prepare chose its codec with fit_codec) and the codec
        it was encoded with; any other codec encodes the raw table's rows in the workers.
        """
        return use_store and ds.has_store() and codec in ("auto", ds.store_codec)

    def make_loader(self, ds: PreparedDataset, graph: Any, input_nodes: torch.Tensor, lc, codec: str, *,
                    batch_size: int, shuffle: bool, device: torch.device, use_store: bool = True,
                    rank: int = 0, world_size: int = 1, tables: Optional[Mapping[str, Any]] = None):
        """A CompressedNeighborLoader over the prepared graph (features from the store when from_store, or
        from ``tables["x"]`` when given: a source such as a ShardedSource)."""
        if codec == NATIVE:
            self.check_baseline()
        from ..loaders.pyg import CompressedNeighborLoader

        x = self.features(ds, codec, use_store, tables)
        return CompressedNeighborLoader(({"x": x}, ds.graph), list(lc.num_neighbors), input_nodes=input_nodes,
                                        batch_size=batch_size, shuffle=shuffle, codec=codec, device=device,
                                        prefetch=lc.prefetch, **worker_options(lc), rank=rank, world_size=world_size,
                                        edge_ids=False)  # the models read no e_id: the sampler skips them

    def features(self, ds, codec: str, use_store: bool, tables: Optional[Mapping[str, Any]]) -> Any:
        """The feature table a loader reads: ``tables["x"]`` when given, else the store when from_store says
        so, else the raw table."""
        if tables is not None:
            return given_table(tables, "x")
        return ds.store() if self.from_store(ds, codec, use_store) else ds.x

    def build_model(self, cfg, ds: PreparedDataset, inputs: Inputs = None) -> torch.nn.Module:
        """The NodeClassifier cfg.model describes, inputs standardised with the table's statistics (`model_input`)."""
        x = model_input(ds, inputs, "x")
        return build_model(cfg.model, x.width, ds.num_classes, len(cfg.loader.num_neighbors), stats=(x.mean, x.std),
                           framework=self.name)

    def forward(self, model, batch, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits of the batch's seeds, their classes); `labels[i]` is the class of input node i."""
        out = model(batch.x, batch.edge_index, batch.batch_size, batch.num_sampled_nodes, batch.num_sampled_edges)
        return out, labels[batch.input_id]

    def seed(self, seed: int) -> None:
        """Seed what shuffling, sampling and the model's initialisation draw from."""
        torch.manual_seed(seed)

    def set_epoch(self, loader, epoch: int) -> None:
        """Distributed runs: the epoch's shuffle, the same on every rank."""
        loader.set_epoch(epoch)


class PyGHetero(PyG):
    """CompressedNeighborLoader over a heterogeneous prepared data set (HeteroData batches) into HeteroSAGE.

    Seeds are target nodes (``input_nodes=(target, ids)``); every featured node type's
    rows travel compressed (from its pre-encoded store when from_store says so).
    HeteroSAGE's last layer computes the target type only, so the convolutions into the
    other types get no gradient (nor do those of an edge type a batch lacks): under DDP,
    find_unused_parameters.
    """

    find_unused_parameters = True

    def check(self, cfg) -> None:
        """Refuse, before any data is loaded, what this front-end cannot run (config.check_config says why)."""
        if cfg.model.arch != "sage":
            raise ValueError(f"model.arch={cfg.model.arch!r} is not accepted with data.name={cfg.data.name!r}; "
                             "use 'sage'")

    def prepare(self, ds) -> Any:
        """Nothing: the loader samples the prepared TypedCSCs themselves (no edge_index is built)."""
        return None

    def from_store(self, ds, codec: str, use_store: bool) -> bool:
        """Whether the featured types' rows come pre-encoded from their stores (codec auto, or the stores' codec)."""
        return use_store and ds.has_store() and codec in ("auto", ds.store_codec)

    def make_loader(self, ds, graph: Any, input_nodes: torch.Tensor, lc, codec: str, *,
                    batch_size: int, shuffle: bool, device: torch.device, use_store: bool = True,
                    rank: int = 0, world_size: int = 1, tables: Optional[Mapping[str, Any]] = None):
        """A CompressedNeighborLoader over the prepared per-type tables (ds.tables), seeds of the target type;
        with `tables`, each featured type's ``x`` from ``tables[type]``."""
        if codec == NATIVE:
            self.check_baseline()
        from ..loaders.pyg import CompressedNeighborLoader

        given = None if tables is None else {t: given_table(tables, t) for t in ds.feature_shapes}
        features, relations, num_nodes = ds.tables(store=given is None and self.from_store(ds, codec, use_store),
                                                   given=given)
        return CompressedNeighborLoader((features, relations, num_nodes), list(lc.num_neighbors), input_nodes=(ds.target, input_nodes),
                                        batch_size=batch_size, shuffle=shuffle, codec=codec, device=device,
                                        prefetch=lc.prefetch, **worker_options(lc), rank=rank, world_size=world_size,
                                        edge_ids=False)  # the models read no e_id: the sampler skips them

    def build_model(self, cfg, ds, inputs: Inputs = None) -> torch.nn.Module:
        """HeteroSAGE over the data set's types, each featured type standardised with its table's statistics
        (`model_input`)."""
        typed = {t: model_input(ds, inputs, t) for t in ds.feature_shapes}
        model = HeteroSAGE(ds.node_types, ds.edge_types, {t: x.width for t, x in typed.items()},
                           cfg.model.hidden, ds.num_classes, len(cfg.loader.num_neighbors), ds.target,
                           dropout=cfg.model.dropout)
        for t, x in typed.items():
            model.set_feature_stats(t, x.mean, x.std)
        self.target = ds.target
        return model

    def forward(self, model, batch, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits of the batch's target seeds, their classes); `labels[i]` is the class of input node i."""
        seeds = batch[self.target]
        num_nodes = {t: batch[t].num_nodes for t in batch.node_types}
        hops_nodes = {t: [int(v) for v in batch[t].num_sampled_nodes] for t in batch.node_types}
        hops_edges = {e: [int(v) for v in batch[e].num_sampled_edges] for e in batch.edge_types}
        out = model(batch.x_dict, batch.edge_index_dict, num_nodes, seeds.batch_size, hops_nodes, hops_edges)
        return out, labels[seeds.input_id]


class DGL:
    """CompressedDGLDataLoader batches (input_nodes, output_nodes, blocks) into DGL's GraphSAGE."""

    name = "dgl"
    find_unused_parameters = False  # as PyG's

    def __init__(self):
        self._dgl = None

    @property
    def dgl(self):
        """The dgl module (imported on first use)."""
        if self._dgl is None:
            self._dgl = import_dgl()
        return self._dgl

    def check(self, cfg) -> None:
        """Refuse, before any data is loaded, what this front-end cannot run: no dgl, another model."""
        check_arch(self.name, cfg.model.arch)
        self.dgl  # noqa: B018 - raises ImportError saying where dgl runs

    def check_baseline(self) -> None:
        """Nothing: DGL's own DataLoader runs the baseline (codec NATIVE)."""

    def check_device(self, device: torch.device) -> None:
        """Refuse a device this dgl cannot place graphs on (the index's dgl wheels are CPU builds)."""
        if device.type == "cpu":
            return
        try:
            self.dgl.graph(([0], [0])).to(device)
        except Exception as e:
            raise ValueError(f"loader.device={str(device)!r}, but this dgl cannot place graphs there "
                             f"({type(e).__name__}: {e}); use loader.device=cpu or a CUDA build of dgl") from None

    def prepare(self, ds: PreparedDataset):
        """The prepared data set as a DGL graph (CSC only) with ndata "feat" and "label" (no label: a link folder;
        no "feat": a data set opened without its features, whose loaders take it from ``tables``).

        The feature table stays memory-mapped (not copied); DGL wants one id type for the whole
        graph, so int32 indices are widened to int64 (a copy).
        """
        import numpy as np

        from ..data.prepared import as_tensor

        dgl = self.dgl
        csc = ds.graph  # in-edges by destination; edge ids in CSC order (no edge features here)
        indices = np.asarray(csc.indices, dtype=np.int64)
        g = dgl.graph(("csc", (as_tensor(csc.indptr), as_tensor(indices), torch.tensor([], dtype=torch.int64))),
                      num_nodes=ds.num_nodes).formats("csc")  # only CSC: workers would build COO and CSR too
        if ds.has_features:  # a sharded run's loaders serve "feat" from its shards (node_stores)
            g.ndata["feat"] = ds.x
        if isinstance(ds, PreparedDataset):  # a link folder (task link) has no labels
            g.ndata["label"] = ds.y  # int64, -1 for unlabeled nodes (the splits hold labeled nodes only)
        return g

    def from_store(self, ds: PreparedDataset, codec: str, use_store: bool) -> bool:
        """Never: DGL's graph holds tensors, so the workers encode the raw table's rows."""
        return False

    def make_loader(self, ds: PreparedDataset, graph: Any, input_nodes: torch.Tensor, lc, codec: str, *,
                    batch_size: int, shuffle: bool, device: torch.device, use_store: bool = True,
                    rank: int = 0, world_size: int = 1, tables: Optional[Mapping[str, Any]] = None):
        """CompressedDGLDataLoader (or DGL's own DataLoader for codec NATIVE) with DGL's NeighborSampler; with
        `tables`, node feature "feat" from ``tables["x"]`` instead of the graph's ndata."""
        dgl = self.dgl
        sampler = dgl.dataloading.NeighborSampler(list(lc.num_neighbors), prefetch_node_feats=["feat"],
                                                  prefetch_labels=["label"])
        return self._loader(graph, input_nodes, sampler, lc, codec, tables, device=device, batch_size=batch_size,
                            shuffle=shuffle, use_ddp=world_size > 1)

    def _loader(self, graph, seeds, sampler, lc, codec: str, tables: Optional[Mapping[str, Any]], **kw):
        """CompressedDGLDataLoader over `seeds` with `sampler` ("feat" from ``tables["x"]`` when given), or
        DGL's own DataLoader for codec NATIVE."""
        kw.update(worker_options(lc))
        if tables is not None:
            if codec == NATIVE:
                raise ValueError(f"codec {NATIVE!r} (DGL's own DataLoader) reads the graph's ndata and takes no "
                                 "tables; use a compressed codec (auto, or the tables' own)")
            kw["node_stores"] = {"feat": given_table(tables, "x")}
        if codec == NATIVE:
            from ..pipeline.stats import LoaderStats

            loader = self.dgl.dataloading.DataLoader(graph, seeds, sampler, **kw)
            loader.stats, loader.codecs = LoaderStats(counted=False), {}  # nothing compressed, nothing counted
            return loader
        from ..loaders.dgl import CompressedDGLDataLoader

        return CompressedDGLDataLoader(graph, seeds, sampler, codec=codec, prefetch=lc.prefetch, **kw)

    def build_model(self, cfg, ds: PreparedDataset, inputs: Inputs = None) -> torch.nn.Module:
        """DGL's GraphSAGE (BlockSAGE), inputs standardised with the table's statistics (`model_input`)."""
        x = model_input(ds, inputs, "x")
        return build_model(cfg.model, x.width, ds.num_classes, len(cfg.loader.num_neighbors), stats=(x.mean, x.std),
                           framework=self.name)

    def forward(self, model, batch, labels: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits of the output nodes, their classes from ``blocks[-1].dstdata["label"]``)."""
        _, _, blocks = batch
        return model(blocks, blocks[0].srcdata["feat"]), blocks[-1].dstdata["label"]

    def seed(self, seed: int) -> None:
        """numpy (DGL's shuffle), torch (model, worker seeds) and dgl (sampling; repeatable with one thread)."""
        import numpy as np

        dgl = self.dgl
        dgl.utils.set_num_threads(1)
        np.random.seed(seed)
        torch.manual_seed(seed)
        dgl.seed(seed)

    def set_epoch(self, loader, epoch: int) -> None:
        """Distributed runs (use_ddp): the loader's epoch, where its DGL has set_epoch (DGL 2.1's node
        DataLoader reshuffles each rank's share itself and has none)."""
        if getattr(loader, "use_ddp", False) and hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)


def worker_options(lc) -> dict:
    """The DataLoader options of LoaderConfig `lc` about its workers: how many, kept between epochs, and how long
    the main process waits for a batch of theirs (torch's `timeout`, loader.worker_timeout; none without workers)."""
    options = dict(num_workers=lc.num_workers, persistent_workers=lc.num_workers > 0)
    if lc.num_workers > 0:  # torch's loader without workers takes no timeout
        options["timeout"] = lc.worker_timeout
    return options


def batches(loader, stage: str) -> Iterator:
    """The batches of `loader`; torch's error for workers silent past the loader's timeout (worker_options) as a
    TimeoutError naming `stage` (e.g. "epoch 2: training") and loader.worker_timeout."""
    try:
        yield from loader
    except RuntimeError as e:
        if not str(e).startswith("DataLoader timed out"):
            raise
        raise TimeoutError(f"{stage}: the loader's DataLoader workers sent no batch in loader.worker_timeout="
                           f"{loader.timeout:g} s: a worker hung, or takes longer than that for a batch (raise "
                           "loader.worker_timeout; 0 waits forever)") from e


def given_table(tables: Mapping[str, Any], name: str) -> Any:
    """``tables[name]``, or a KeyError naming the tables given and the one the data set needs."""
    if name not in tables:
        raise KeyError(f"tables has {sorted(tables)}; this data set needs table {name!r} (open_shards gives one "
                       "per feature table)")
    return tables[name]


def model_input(ds, inputs: Inputs, table: str) -> FeatureInput:
    """Feature table `table`'s model input: ``inputs[table]`` when given (a sharded run: the shards' manifest), else
    the width and feature_stats of the data set's own table."""
    return FeatureInput.of(ds.feature(table)) if inputs is None else given_table(inputs, table)


def import_dgl():
    """dgl, or an ImportError saying where it runs (loaders.dgl chooses its backend)."""
    try:
        from ..loaders import dgl as front  # imports dgl with the pytorch backend
    except ImportError as e:
        raise ImportError(f"loader.framework='dgl' needs dgl, which does not import here ({e}). {DGL_ENV}") from None
    return front.dgl


def get(framework: str, hetero: bool = False):
    """The front-end of `loader.framework` (`hetero`: for a heterogeneous data set)."""
    if framework == "pyg":
        return PyGHetero() if hetero else PyG()
    if framework == "dgl":
        return DGL()
    raise ValueError(f"loader.framework={framework!r} is not accepted; use one of {list(FRAMEWORKS)}")
