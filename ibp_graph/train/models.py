"""GNNs for node classification on sampled subgraphs: GraphSAGE, GCN and GAT (PyG's layers),
GraphSAGE on heterogeneous batches (PyG's HeteroConv), and GraphSAGE on DGL's blocks. Each
framework is imported only by its own model, when it is built."""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..data.input_stats import feature_stats  # noqa: F401 - the models' input statistics, re-exported

ARCHS = ("sage", "gcn", "gat")
#: the link model's decoders: the dot product of the two ends' embeddings, or an MLP on their product.
DECODERS = ("dot", "mlp")
#: architectures of each framework's model (loader.framework -> model.arch).
FRAMEWORK_ARCHS = {"pyg": ARCHS, "dgl": ("sage",)}


class _Standardised(torch.nn.Module):
    """Inputs standardised on the device, ``(x - mean) / std`` per column (set_feature_stats)."""

    def __init__(self, in_channels: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(in_channels))
        self.register_buffer("inv_std", torch.ones(in_channels))

    def set_feature_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Standardise inputs with these per-column statistics."""
        self.mean.copy_(mean)
        self.inv_std.copy_(1.0 / std.clamp_min(1e-12))

    def standardise(self, x: torch.Tensor) -> torch.Tensor:
        """`x` as float32, standardised."""
        return (x.float() - self.mean) * self.inv_std


class NodeClassifier(_Standardised):
    """A PyG BasicGNN that returns the logits of a batch's seed nodes only.

    Features are standardised on the device (``(x - mean) / std``, per column, with
    statistics from `feature_stats`), so the table and its compressed form keep the
    original bits. With the per-hop counts of a NeighborLoader batch, layer ``l`` runs
    only on the nodes and edges that still reach the seeds (PyG's ``trim_to_layer``), so
    the last layer computes ``batch_size`` rows rather than the whole sampled subgraph.
    """

    def __init__(self, arch: str, in_channels: int, hidden: int, num_classes: int, num_layers: int, *,
                 dropout: float = 0.5, heads: int = 4, norm: Optional[str] = None):
        super().__init__(in_channels)
        try:
            from torch_geometric.nn.models import GAT, GCN, GraphSAGE
        except ImportError as e:  # pragma: no cover - torch_geometric is a test dependency
            raise ImportError("ibp_graph.train needs torch_geometric: pip install 'ibp-graph[pyg]'") from e
        if arch not in ARCHS:
            raise ValueError(f"arch={arch!r} is not accepted; use one of {ARCHS}")
        if num_layers < 1:
            raise ValueError(f"num_layers={num_layers!r} is not accepted; use an int >= 1")
        kwargs = dict(in_channels=in_channels, hidden_channels=hidden, num_layers=num_layers,
                      out_channels=num_classes, dropout=dropout, norm=norm)
        if arch == "sage":
            self.gnn = GraphSAGE(**kwargs)
        elif arch == "gcn":
            self.gnn = GCN(**kwargs)
        else:
            if hidden % heads:
                raise ValueError(f"model.hidden={hidden} must be a multiple of model.heads={heads} for gat")
            self.gnn = GAT(heads=heads, **kwargs)
        self.arch = arch
        # GCN's normalisation reads the degrees of a layer's source nodes, which trimming
        # changes (hop-l nodes lose their hop-(l+1) edges); SAGE and GAT only read the
        # in-edges of the nodes they compute, which trimming keeps
        self.trim = arch != "gcn"

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch_size: int,
                num_sampled_nodes: Optional[Sequence[int]] = None,
                num_sampled_edges: Optional[Sequence[int]] = None) -> torch.Tensor:
        """Logits of the first `batch_size` nodes (the seeds)."""
        trim = self.trim and num_sampled_nodes is not None and num_sampled_edges is not None \
            and len(num_sampled_edges) == self.gnn.num_layers
        x = self.standardise(x)
        out = self.gnn(x, edge_index,
                       num_sampled_nodes_per_hop=list(num_sampled_nodes) if trim else None,
                       num_sampled_edges_per_hop=list(num_sampled_edges) if trim else None)
        return out[:batch_size]


class BlockSAGE(_Standardised):
    """DGL's GraphSAGE on a mini-batch of blocks (SAGEConv, mean): logits of the last block's nodes."""

    def __init__(self, in_channels: int, hidden: int, num_classes: int, num_layers: int, *,
                 dropout: float = 0.5):
        super().__init__(in_channels)
        try:
            import dgl.nn
        except ImportError as e:  # pragma: no cover - exercised only without dgl
            raise ImportError("BlockSAGE needs dgl: run it in the DGL environment (`make venv-dgl`, .venv-dgl)") from e
        if num_layers < 1:
            raise ValueError(f"num_layers={num_layers!r} is not accepted; use an int >= 1")
        sizes = [in_channels] + [hidden] * (num_layers - 1) + [num_classes]
        self.layers = torch.nn.ModuleList(dgl.nn.SAGEConv(a, b, "mean") for a, b in zip(sizes[:-1], sizes[1:]))
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, blocks, x: torch.Tensor) -> torch.Tensor:
        """Logits of ``blocks[-1]``'s destination nodes (the seeds)."""
        h = self.standardise(x)
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i < len(self.layers) - 1:
                h = self.dropout(h.relu())
        return h


class HeteroSAGE(torch.nn.Module):
    """GraphSAGE on a heterogeneous batch: logits of the target type's seed nodes.

    Each layer is PyG's HeteroConv with one SAGEConv (mean) per edge type, summed per
    destination type (what ``to_hetero(GraphSAGE, metadata, aggr="sum")`` builds), then
    ReLU and dropout; a linear layer classifies the target nodes. Features are
    standardised per node type on the device (set_feature_stats); node types without
    features (ogbn-mag's authors, institutions, fields) start from one learned vector per
    type, so their first-layer messages are what they gather from typed neighbours
    (memory per type, not per node: MAG240M's 122 M authors cost nothing).
    """

    def __init__(self, node_types: Sequence[str], edge_types: Sequence[tuple[str, str, str]],
                 in_channels: dict[str, int], hidden: int, num_classes: int, num_layers: int, target: str, *,
                 dropout: float = 0.5):
        super().__init__()
        try:
            from torch_geometric.nn import HeteroConv, SAGEConv
        except ImportError as e:  # pragma: no cover - torch_geometric is a test dependency
            raise ImportError("ibp_graph.train needs torch_geometric: pip install 'ibp-graph[pyg]'") from e
        if num_layers < 1:
            raise ValueError(f"num_layers={num_layers!r} is not accepted; use an int >= 1")
        if target not in in_channels:
            raise ValueError(f"target={target!r} has no features; featured node types: {sorted(in_channels)}")
        self.target = target
        self.inputs = torch.nn.ModuleDict({t: _Standardised(c) for t, c in in_channels.items()})
        self.type_vectors = torch.nn.ParameterDict(
            {t: torch.nn.Parameter(torch.randn(hidden) / hidden ** 0.5) for t in node_types if t not in in_channels})
        dims = {t: in_channels.get(t, hidden) for t in node_types}
        self.convs = torch.nn.ModuleList()
        for _ in range(num_layers):
            self.convs.append(HeteroConv({et: SAGEConv((dims[et[0]], dims[et[2]]), hidden) for et in edge_types},
                                         aggr="sum"))
            dims = {t: hidden for t in node_types}
        self.classify = torch.nn.Linear(hidden, num_classes)
        self.dropout = torch.nn.Dropout(dropout)

    def set_feature_stats(self, node_type: str, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Standardise `node_type`'s inputs with these per-column statistics."""
        self.inputs[node_type].set_feature_stats(mean, std)

    def forward(self, x_dict: dict, edge_index_dict: dict, num_nodes_dict: dict[str, int], batch_size: int,
                num_sampled_nodes_dict: Optional[dict] = None,
                num_sampled_edges_dict: Optional[dict] = None) -> torch.Tensor:
        """Logits of the first `batch_size` target nodes (the seeds).

        With a NeighborLoader batch's per-hop counts (per type), layer ``l`` runs only on
        the nodes and edges that still reach the seeds (PyG's ``trim_to_layer``): the last
        layer computes the seeds' rows, not the whole sampled subgraph's.
        """
        from torch_geometric.utils import trim_to_layer

        h = {t: m.standardise(x_dict[t]) for t, m in self.inputs.items()}
        for t, vec in self.type_vectors.items():
            h[t] = vec.expand(num_nodes_dict.get(t, 0), -1)
        trim = num_sampled_nodes_dict is not None and num_sampled_edges_dict is not None and all(
            len(v) == len(self.convs) for v in num_sampled_edges_dict.values())
        edges = edge_index_dict
        for i, conv in enumerate(self.convs):
            if trim:
                h, edges, _ = trim_to_layer(i, num_sampled_nodes_dict, num_sampled_edges_dict, h, edges)
            out = conv(h, edges)
            h = {t: self.dropout(v.relu()) for t, v in out.items()}
        return self.classify(h[self.target][:batch_size])


def check_arch(framework: str, arch: str) -> None:
    """Refuse a model.arch the framework's model does not build."""
    archs = FRAMEWORK_ARCHS.get(framework, ())
    if arch not in archs:
        raise ValueError(f"model.arch={arch!r} is not accepted with loader.framework={framework!r}; "
                         f"use one of {list(archs)}")


def build_model(cfg, in_channels: int, num_classes: int, num_layers: int,
                stats: Optional[tuple[torch.Tensor, torch.Tensor]] = None, *,
                framework: str = "pyg") -> torch.nn.Module:
    """The model a ModelConfig describes for `framework` (inputs standardised with `stats` =
    (mean, std) when given): a NodeClassifier (PyG) or a BlockSAGE (DGL)."""
    check_arch(framework, cfg.arch)
    if framework == "dgl":
        model = BlockSAGE(in_channels, cfg.hidden, num_classes, num_layers, dropout=cfg.dropout)
    else:
        model = NodeClassifier(cfg.arch, in_channels, cfg.hidden, num_classes, num_layers,
                               dropout=cfg.dropout, heads=cfg.heads, norm=cfg.norm)
    if stats is not None:
        model.set_feature_stats(*stats)
    return model


class LinkModel(torch.nn.Module):
    """Link prediction: a GNN encoder (node embeddings: a NodeClassifier or BlockSAGE whose outputs are
    `hidden` wide) and a decoder scoring (source, target) pairs, as logits."""

    def __init__(self, encoder: torch.nn.Module, hidden: int, decoder: str = "dot", *, dropout: float = 0.5):
        super().__init__()
        if decoder not in DECODERS:
            raise ValueError(f"decoder={decoder!r} is not accepted; use one of {list(DECODERS)}")
        self.encoder = encoder
        self.decoder = decoder
        # OGB's citation2 LinkPredictor: an MLP on the ends' element-wise product
        self.mlp = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Dropout(dropout),
                                       torch.nn.Linear(hidden, 1)) if decoder == "mlp" else None

    def forward(self, pairs: tuple[torch.Tensor, torch.Tensor], *inputs) -> torch.Tensor:
        """Logits of the pairs (local node ids `pairs` = (sources, targets)) of the encoder's output on
        `inputs` (one call, so that DistributedDataParallel sees the whole step)."""
        h = self.encoder(*inputs)
        # index_select, not h[pairs]: the gradient of advanced indexing with repeated ids is accumulated with
        # atomic adds on several CPU threads (a different rounding each run); index_select's is not
        return self.score(h.index_select(0, pairs[0]), h.index_select(0, pairs[1]))

    def score(self, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        """Logits of the pairs (h_src[..., i], h_dst[..., i]): the last dimension is the embedding."""
        if self.mlp is None:
            return (h_src * h_dst).sum(-1)
        return self.mlp(h_src * h_dst).squeeze(-1)


def build_link_model(cfg, link_cfg, in_channels: int, num_layers: int,
                     stats: Optional[tuple[torch.Tensor, torch.Tensor]] = None, *,
                     framework: str = "pyg") -> LinkModel:
    """The link model a ModelConfig and LinkConfig describe: `framework`'s GraphSAGE with `cfg.hidden` outputs
    (inputs standardised with `stats`), then `link_cfg.decoder`."""
    encoder = build_model(cfg, in_channels, cfg.hidden, num_layers, stats, framework=framework)
    return LinkModel(encoder, cfg.hidden, link_cfg.decoder, dropout=cfg.dropout)
