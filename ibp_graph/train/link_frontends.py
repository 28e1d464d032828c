"""The link-prediction loop's front-ends: what differs between PyG and DGL for `task: link`.

A front-end is the loop's loader factory and model runner:

- ``make_train_loader``: the training batches over the split's training edges, with
  binary negatives. PyG: ``CompressedLinkNeighborLoader`` (PyG's ``LinkNeighborLoader``
  arguments: ``edge_label_index``, ``edge_label=None``, ``neg_sampling="binary"``,
  ``neg_sampling_ratio``; batches with PyG's fields ``x``, ``edge_index``, ``n_id``,
  ``edge_label_index`` in local ids, ``edge_label`` 1 for positives and 0 for the
  negatives appended, ``num_sampled_nodes``/``num_sampled_edges``). DGL:
  ``CompressedDGLDataLoader`` over the training edges' ids with DGL's
  ``as_edge_prediction_sampler`` and a ``negative_sampler.Uniform`` (batches
  ``(input_nodes, pair_graph, neg_pair_graph, blocks)``); codec ``native``: DGL's own
  ``DataLoader``.
- ``forward``: one training batch -> (logits of its positive and negative pairs, their 0/1 labels).
- ``embed``: every node's embedding, batch by batch from a node loader over all nodes
  (``CompressedNeighborLoader``, or DGL's node batches), for ranking valid/test edges.

Both loader factories take ``tables`` as the node front-ends' make_loader does (``{"x": source}``, e.g. a
ShardedSource: train/sharding.py); every rank's node loader takes the same batches (all nodes, in id order),
as a sharded source needs.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np
import torch

from .frontends import DGL, NATIVE, Inputs, PyG, model_input, worker_options
from .models import build_link_model, check_arch

__all__ = ["LinkPyG", "LinkDGL", "get", "train_edge_ids"]


class LinkPyG(PyG):
    """CompressedLinkNeighborLoader batches into a LinkModel (PyG's GraphSAGE encoder)."""

    native_loader = "LinkNeighborLoader"

    def make_train_loader(self, ds, graph: Any, cfg, codec: str, *, device: torch.device, rank: int = 0,
                          world_size: int = 1, tables: Optional[Mapping[str, Any]] = None):
        """The training batches: PyG's LinkNeighborLoader semantics over the split's training edges."""
        if codec == NATIVE:
            self.check_baseline()
        from ..loaders.pyg import CompressedLinkNeighborLoader

        lc, train = cfg.loader, ds.split["train"]
        x = self.features(ds, codec, cfg.data.store, tables)
        return CompressedLinkNeighborLoader(
            ({"x": x}, ds.graph), list(lc.num_neighbors),
            edge_label_index=torch.stack([train["source_node"], train["target_node"]]), edge_label=None,
            neg_sampling="binary", neg_sampling_ratio=cfg.link.neg_sampling_ratio, batch_size=lc.batch_size,
            shuffle=True, codec=codec, device=device, prefetch=lc.prefetch, **worker_options(lc), rank=rank,
            world_size=world_size,
            edge_ids=False)  # the models read no e_id: the sampler skips them

    def make_node_loader(self, ds, graph: Any, cfg, codec: str, *, device: torch.device,
                         tables: Optional[Mapping[str, Any]] = None):
        """Batches of every node (in id order) with their sampled neighbourhoods, for `embed`."""
        return self.make_loader(ds, graph, torch.arange(ds.num_nodes), cfg.loader, codec,
                                batch_size=cfg.loader.eval_batch_size, shuffle=False, device=device,
                                use_store=cfg.data.store, tables=tables)

    def build_model(self, cfg, ds, inputs: Inputs = None) -> torch.nn.Module:
        """The LinkModel cfg.model and cfg.link describe, inputs standardised with the table's statistics
        (frontends.model_input)."""
        return link_model(cfg, ds, inputs, self.name)

    def forward(self, model, batch, labels=None) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits of the batch's edge_label_index pairs, edge_label as floats).

        The pairs' ends are the batch's seed nodes (the first ``num_sampled_nodes[0]``), so with
        the per-hop counts the encoder computes those rows only (trimmed layers).
        """
        hops = getattr(batch, "num_sampled_nodes", None)
        hop_edges = getattr(batch, "num_sampled_edges", None)
        seeds = int(hops[0]) if hops is not None else batch.num_nodes
        pairs = (batch.edge_label_index[0], batch.edge_label_index[1])
        return model(pairs, batch.x, batch.edge_index, seeds, hops, hop_edges), batch.edge_label.float()

    def embed(self, model, loader, num_nodes: int, device: torch.device) -> torch.Tensor:
        """Every node's embedding (num_nodes, hidden), from `make_node_loader`'s batches."""
        out = None
        for batch in loader:
            h = model.encoder(batch.x, batch.edge_index, batch.batch_size, batch.num_sampled_nodes,
                              batch.num_sampled_edges)
            if out is None:
                out = torch.zeros(num_nodes, h.shape[1], device=device)
            out[batch.input_id.to(device)] = h
        return out


class LinkDGL(DGL):
    """DGL edge-prediction batches into a LinkModel (DGL's GraphSAGE encoder on blocks)."""

    def check(self, cfg) -> None:
        """Refuse what this front-end cannot run: no dgl, another model, a fractional negative ratio."""
        check_arch(self.name, cfg.model.arch)
        ratio = cfg.link.neg_sampling_ratio
        if ratio != int(ratio):
            raise ValueError(f"link.neg_sampling_ratio={ratio!r} is not accepted with loader.framework='dgl'; "
                             "expected a whole number (dgl's negative_sampler.Uniform(k) draws k per edge)")
        self.dgl  # noqa: B018 - raises ImportError saying where dgl runs

    def prepare(self, ds):
        """DGL's graph of the link folder, in CSC and COO: the edge-wise sampler's pair graphs are edge
        subgraphs, which DGL builds from COO only."""
        return super().prepare(ds).formats(["csc", "coo"])

    def make_train_loader(self, ds, graph: Any, cfg, codec: str, *, device: torch.device, rank: int = 0,
                          world_size: int = 1, tables: Optional[Mapping[str, Any]] = None):
        """The training batches: the training edges' ids in `graph`, DGL's as_edge_prediction_sampler with
        ``negative_sampler.Uniform(neg_sampling_ratio)``."""
        dgl, lc = self.dgl, cfg.loader
        sampler = dgl.dataloading.as_edge_prediction_sampler(
            dgl.dataloading.NeighborSampler(list(lc.num_neighbors), prefetch_node_feats=["feat"]),
            negative_sampler=dgl.dataloading.negative_sampler.Uniform(int(cfg.link.neg_sampling_ratio)))
        seeds = torch.from_numpy(train_edge_ids(ds.graph, ds.split["train"]))
        return self._loader(graph, seeds, sampler, lc, codec, tables, batch_size=lc.batch_size, shuffle=True,
                            device=device, use_ddp=world_size > 1)

    def make_node_loader(self, ds, graph: Any, cfg, codec: str, *, device: torch.device,
                         tables: Optional[Mapping[str, Any]] = None):
        """Blocks of every node (in id order) with their sampled neighbourhoods, for `embed`."""
        lc = cfg.loader
        sampler = self.dgl.dataloading.NeighborSampler(list(lc.num_neighbors), prefetch_node_feats=["feat"])
        return self._loader(graph, torch.arange(ds.num_nodes), sampler, lc, codec, tables, batch_size=lc.eval_batch_size,
                            shuffle=False, device=device, use_ddp=False)

    def build_model(self, cfg, ds, inputs: Inputs = None) -> torch.nn.Module:
        """The LinkModel with DGL's GraphSAGE (BlockSAGE) encoder (inputs as LinkPyG's)."""
        return link_model(cfg, ds, inputs, self.name)

    def forward(self, model, batch, labels=None) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits of the pair graph's edges then the negative pair graph's, 1s then 0s)."""
        _, pair, neg_pair, blocks = batch
        ps, pd = pair.edges()
        ns, nd = neg_pair.edges()
        logits = model((torch.cat([ps, ns]), torch.cat([pd, nd])), blocks, blocks[0].srcdata["feat"])
        labels = torch.cat([torch.ones(ps.shape[0], device=logits.device),
                            torch.zeros(ns.shape[0], device=logits.device)])
        return logits, labels

    def embed(self, model, loader, num_nodes: int, device: torch.device) -> torch.Tensor:
        """Every node's embedding (num_nodes, hidden), from `make_node_loader`'s blocks."""
        out = None
        for _, output_nodes, blocks in loader:
            h = model.encoder(blocks, blocks[0].srcdata["feat"])
            if out is None:
                out = torch.zeros(num_nodes, h.shape[1], device=device)
            out[output_nodes.to(device)] = h
        return out


def link_model(cfg, ds, inputs: Inputs, framework: str) -> torch.nn.Module:
    """The LinkModel of `framework` cfg.model and cfg.link describe, inputs standardised with table x's statistics
    (frontends.model_input: from `inputs` when given)."""
    x = model_input(ds, inputs, "x")
    return build_link_model(cfg.model, cfg.link, x.width, len(cfg.loader.num_neighbors), stats=(x.mean, x.std),
                            framework=framework)


def train_edge_ids(graph, train: dict) -> np.ndarray:
    """The ids (CSC positions) in `graph` of the training edges (source_node -> target_node): the seeds of
    DGL's edge-prediction batches over a graph built from that CSC. A ValueError when one is not there."""
    n = graph.num_nodes
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(np.asarray(graph.indptr, dtype=np.int64)))
    keys = dst * n + np.asarray(graph.indices, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    want = train["target_node"].numpy() * n + train["source_node"].numpy()
    pos = np.minimum(np.searchsorted(keys[order], want), keys.shape[0] - 1)
    found = keys[order][pos] == want if keys.shape[0] else np.zeros(want.shape[0], dtype=bool)
    if not found.all():
        i = int(np.flatnonzero(~found)[0])
        raise ValueError(f"training edge {i} ({int(train['source_node'][i])} -> {int(train['target_node'][i])}) "
                         "is not in the prepared graph: prepare again")
    return order[pos]


def get(framework: str):
    """The link front-end of `loader.framework`."""
    if framework == "pyg":
        return LinkPyG()
    if framework == "dgl":
        return LinkDGL()
    from .config import FRAMEWORKS

    raise ValueError(f"loader.framework={framework!r} is not accepted; use one of {list(FRAMEWORKS)}")
