"""CompressedNeighborLoader with PyG's own helpers: it is a NeighborLoader, and layer-wise
inference (BasicGNN.inference), ZipLoader, CachedLoader and `loader(index)` work on it,
with `filter_per_worker` either way."""
import pickle

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import CachedLoader, NeighborLoader, ZipLoader
from torch_geometric.nn import GAT, GCN, GraphSAGE
from torch_geometric.sampler import NodeSamplerInput

from ibp_graph.loaders.pyg import CompressedNeighborLoader
from ibp_graph.pipeline.batch import EncodedBatch
from tests.loaders.test_pyg import check_batch, make_graph

FIELDS = ("x", "y", "n_id", "e_id", "edge_index", "input_id", "edge_attr")


def small_graph(num_nodes=240, num_edges=1500, dim=12, seed=3):
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(num_nodes, dim, generator=g),
                edge_index=torch.randint(0, num_nodes, (2, num_edges), generator=g))


def assert_same(a: Data, b: Data, fields=FIELDS):
    for key in fields:
        if key in a or key in b:
            assert torch.equal(a[key], b[key]), key
    assert a.batch_size == b.batch_size


def test_it_is_a_neighbor_loader_with_pyg_s_fields():
    data = make_graph(300, 1000)
    mask = torch.zeros(300, dtype=torch.bool)
    mask[::3] = True
    loader = CompressedNeighborLoader(data, [3, 2], input_nodes=mask, batch_size=16)
    assert isinstance(loader, NeighborLoader)
    assert loader.data is data and loader.input_nodes is mask
    assert isinstance(loader.input_data, NodeSamplerInput)
    assert torch.equal(loader.input_data.node, mask.nonzero().view(-1))
    assert torch.equal(loader.input_data.input_id, mask.nonzero().view(-1))  # a mask: node ids
    assert len(loader.dataset) == 100 and len(loader) == 7
    assert loader.filter_per_worker is True  # PyG's inference for CPU data
    assert loader.node_sampler.num_neighbors == [3, 2]


@pytest.mark.parametrize("model_cls, kwargs", [
    (GraphSAGE, {}),
    (GCN, {"normalize": False}),  # gcn_norm would read degrees of nodes outside a batch's 1-hop subgraph
    (GAT, {"heads": 2}),
])
def test_layer_wise_inference_equals_a_full_graph_forward(model_cls, kwargs):
    data = small_graph()
    torch.manual_seed(0)
    model = model_cls(12, 16, num_layers=2, out_channels=5, **kwargs).eval()
    loader = CompressedNeighborLoader(data, [-1], batch_size=64, codec="auto")
    out = model.inference(loader)
    full = model(data.x, data.edge_index)
    assert out.shape == full.shape == (240, 5)
    assert torch.allclose(out, full, atol=1e-5, rtol=1e-5)
    assert torch.allclose(model.inference(loader, cache=True), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("filter_per_worker, num_workers", [(True, 0), (False, 0), (False, 2)])
def test_zip_loader_gives_the_loaders_batches(filter_per_worker, num_workers):
    data = make_graph(500, 4000)
    kw = dict(batch_size=50, codec="ibp", device="cpu")
    first = CompressedNeighborLoader(data, [-1], **kw)
    second = CompressedNeighborLoader(data, [-1, -1], input_nodes=torch.arange(100, 500), **kw)
    zipped = ZipLoader([first, second], batch_size=50, filter_per_worker=filter_per_worker,
                       num_workers=num_workers)
    assert len(zipped) == 8
    n = 0
    for (a, b), ref_a, ref_b in zip(zipped, first, second):
        assert_same(a, ref_a)  # full fan-outs: the same subgraph whoever samples it
        assert_same(b, ref_b)
        check_batch(b, data, torch.arange(100, 500))
        n += 1
    assert n == 8


def test_cached_loader_replays_the_loader_s_batches():
    data = make_graph(400, 3000)
    loader = CompressedNeighborLoader(data, [-1], batch_size=64, codec="auto")
    cached = CachedLoader(loader)
    first, again = list(cached), list(cached)
    assert len(first) == len(again) == len(loader) == 7
    for a, b, ref in zip(first, again, loader):
        assert a is b
        assert_same(a, ref)


@pytest.mark.parametrize("filter_per_worker", [True, False])
def test_calling_the_loader_samples_those_input_positions(filter_per_worker):
    data = make_graph(300, 2000)
    ids = torch.arange(0, 300, 2)
    loader = CompressedNeighborLoader(data, [4, 2], input_nodes=ids, batch_size=10,
                                      filter_per_worker=filter_per_worker)
    torch.manual_seed(5)
    batch = loader([3, 0, 7])
    assert isinstance(batch, Data)
    check_batch(batch, data, ids)
    assert batch.input_id.tolist() == [3, 0, 7] and batch.n_id[:3].tolist() == [6, 0, 14]
    torch.manual_seed(5)
    out = loader.collate_fn(torch.tensor([3, 0, 7]))
    assert isinstance(out, Data if filter_per_worker else EncodedBatch)  # PyG's split of the work
    again = out if filter_per_worker else loader.filter_fn(out)
    assert_same(again, batch)  # same RNG state, same sample


def test_filter_per_worker_either_way_gives_identical_batches():
    data = make_graph(1000, 8000)
    out = {}
    for fpw in (True, False):
        torch.manual_seed(9)
        loader = CompressedNeighborLoader(data, [5, 3], batch_size=128, shuffle=True, num_workers=2,
                                          filter_per_worker=fpw)
        out[fpw] = list(loader)
    assert len(out[True]) == len(out[False]) == 8
    for a, b in zip(out[True], out[False]):
        check_batch(a, data, torch.arange(1000))
        assert_same(a, b)


def test_the_loader_pickles_without_its_decode_stage():
    """Spawned workers receive the loader (collate_fn is its method), as with PyG's loaders."""
    loader = CompressedNeighborLoader(make_graph(200, 800), [2], batch_size=20, codec="ebp")
    next(iter(loader))
    clone = pickle.loads(pickle.dumps(loader))
    assert clone._stage is None
    batch = clone([1, 2, 3])  # rebuilds its decode stage when it has to decode
    assert torch.equal(batch.x, loader.data.x[batch.n_id])
