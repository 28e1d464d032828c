"""Small generated stand-ins for the data sets of PyG's and DGL's example scripts (same schema).

Labels follow the features (the class is the argmax of four feature columns, pushed along
edges), so a couple of epochs of the examples' models learn something: a loop that breaks
the plumbing (wrong rows, wrong seeds, wrong edges) stops learning or changes its losses.
"""
from __future__ import annotations

import torch


def _labelled(num_nodes: int, dim: int, num_classes: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(num_nodes, dim, generator=g)
    y = x[:, :num_classes].argmax(dim=1)
    return x, y


def homogeneous(num_nodes: int = 600, avg_degree: int = 8, dim: int = 16, num_classes: int = 4, seed: int = 0):
    """A reddit / ogbn-products-like Data: x, y, edge_index, train/val/test masks."""
    from torch_geometric.data import Data

    return Data(**homogeneous_tensors(num_nodes, avg_degree, dim, num_classes, seed))


def homogeneous_tensors(num_nodes: int = 600, avg_degree: int = 8, dim: int = 16, num_classes: int = 4,
                        seed: int = 0) -> dict[str, torch.Tensor]:
    """`homogeneous`'s tensors by name (x, y, edge_index, the masks), for DGL's graphs."""
    g = torch.Generator().manual_seed(seed)
    x, y = _labelled(num_nodes, dim, num_classes, g)
    num_edges = num_nodes * avg_degree
    src = torch.randint(0, num_nodes, (num_edges,), generator=g)
    # homophily: most edges join nodes of one class (the models' neighbour averages help)
    same = torch.rand(num_edges, generator=g) < 0.8
    by_class = [torch.nonzero(y == c).view(-1) for c in range(num_classes)]
    dst = torch.randint(0, num_nodes, (num_edges,), generator=g)
    for c, members in enumerate(by_class):
        pick = same & (y[src] == c)
        dst[pick] = members[torch.randint(0, members.numel(), (int(pick.sum()),), generator=g)]
    perm = torch.randperm(num_nodes, generator=g)
    masks = {name: torch.zeros(num_nodes, dtype=torch.bool) for name in ("train_mask", "val_mask", "test_mask")}
    masks["train_mask"][perm[: num_nodes // 2]] = True
    masks["val_mask"][perm[num_nodes // 2: 3 * num_nodes // 4]] = True
    masks["test_mask"][perm[3 * num_nodes // 4:]] = True
    return dict(x=x, y=y, edge_index=torch.stack([src, dst]), **masks)


def mag(num_papers: int = 400, num_authors: int = 300, dim: int = 16, num_classes: int = 4, seed: int = 1):
    """An ogbn-mag-like HeteroData: papers (x, y, train_mask), authors (x), writes and cites edges,
    made undirected as PyG's to_hetero_mag.py does (T.ToUndirected: rev_writes, cites both ways)."""
    import torch_geometric.transforms as T
    from torch_geometric.data import HeteroData

    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["paper"].x, data["paper"].y = _labelled(num_papers, dim, num_classes, g)
    data["author"].x = torch.randn(num_authors, dim, generator=g)
    data["paper"].train_mask = torch.rand(num_papers, generator=g) < 0.6
    writes = torch.stack([torch.randint(0, num_authors, (3 * num_papers,), generator=g),
                          torch.randint(0, num_papers, (3 * num_papers,), generator=g)])
    cites = torch.stack([torch.randint(0, num_papers, (4 * num_papers,), generator=g),
                         torch.randint(0, num_papers, (4 * num_papers,), generator=g)])
    data["author", "writes", "paper"].edge_index = writes
    data["paper", "cites", "paper"].edge_index = cites
    return T.ToUndirected()(data)
