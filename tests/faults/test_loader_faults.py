"""Issue 13's loader rows: a node attribute with the wrong number of rows is refused by name
instead of being dropped from every batch."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from ibp_graph.loaders.pyg import CompressedNeighborLoader


def _data(num_nodes: int = 50, x_rows: int = 50) -> Data:
    g = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, num_nodes, (2, 200), generator=g)
    return Data(x=torch.randn(x_rows, 8, generator=g), edge_index=edge_index, num_nodes=num_nodes)


def test_x_with_fewer_rows_than_num_nodes_is_refused_by_name():
    with pytest.raises(ValueError, match=r"node attribute 'data.x' has 40 rows; the graph has 50 nodes"):
        CompressedNeighborLoader(_data(x_rows=40), num_neighbors=[3], batch_size=8, codec="identity")


def test_x_with_one_row_per_node_is_in_every_batch():
    data = _data()
    loader = CompressedNeighborLoader(data, num_neighbors=[3], batch_size=16, codec="identity")
    batches = list(loader)
    assert batches and all(torch.equal(b.x, data.x[b.n_id]) for b in batches)
