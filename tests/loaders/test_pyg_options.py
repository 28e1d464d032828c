"""NeighborLoader options with PyG's semantics: seed samplers (sampler= / batch_sampler=),
weighted sampling (weight_attr), the bidirectional and induced subgraphs, disjoint trees."""
import contextlib

import pytest
import torch
from torch.utils.data import BatchSampler, SequentialSampler, WeightedRandomSampler
from torch_geometric.data import Data
from torch_geometric.loader import ImbalancedSampler
from torch_geometric.utils import is_undirected

from ibp_graph.loaders.pyg import CompressedNeighborLoader
from tests.loaders.test_pyg import make_graph


def real_edges(data):
    return set(map(tuple, data.edge_index.t().tolist()))


def global_edges(batch):
    return [tuple(e) for e in batch.n_id[batch.edge_index].t().tolist()]


def test_a_weighted_random_sampler_draws_the_seeds():
    data = make_graph(500, 3000)
    ids = torch.arange(0, 500, 5)
    g = torch.Generator()
    sampler = WeightedRandomSampler(torch.rand(100, generator=torch.Generator().manual_seed(1)),
                                    num_samples=70, generator=g)
    g.manual_seed(0)
    drawn = torch.tensor(list(sampler))
    loader = CompressedNeighborLoader(data, [3], input_nodes=ids, batch_size=16, sampler=sampler)
    assert len(loader) == 5
    g.manual_seed(0)
    batches = list(loader)
    assert [b.batch_size for b in batches] == [16, 16, 16, 16, 6]
    assert torch.equal(torch.cat([b.input_id for b in batches]), drawn)  # positions, in the sampler's order
    for b in batches:
        assert torch.equal(b.n_id[:b.batch_size], ids[b.input_id])
        assert torch.equal(b.x, data.x[b.n_id])


def test_imbalanced_sampler_balances_the_classes_of_the_seeds():
    data = make_graph(1000, 5000)
    data.y = (torch.arange(1000) % 10 == 0).long()  # class 1 is a tenth of the nodes
    torch.manual_seed(0)
    loader = CompressedNeighborLoader(data, [2], batch_size=100, sampler=ImbalancedSampler(data.y))
    seeds = torch.cat([b.n_id[:b.batch_size] for b in loader])
    assert seeds.numel() == 1000
    share = data.y[seeds].float().mean().item()
    assert 0.4 < share < 0.6  # uniform seeds would give 0.1


def test_a_batch_sampler_makes_the_batches():
    data = make_graph(200, 1000)
    loader = CompressedNeighborLoader(data, [2], batch_sampler=BatchSampler(SequentialSampler(range(200)), 48,
                                                                           drop_last=True))
    batches = list(loader)
    assert len(loader) == len(batches) == 4
    assert torch.equal(torch.cat([b.input_id for b in batches]), torch.arange(192))


def test_seed_sampler_errors_name_the_arguments():
    data = make_graph(100, 500)
    s = SequentialSampler(range(100))
    with pytest.raises(ValueError, match="shuffle=True with a sampler= or batch_sampler= is not accepted"):
        CompressedNeighborLoader(data, [2], sampler=s, shuffle=True)
    with pytest.raises(ValueError, match="mutually exclusive"):
        CompressedNeighborLoader(data, [2], sampler=s, batch_sampler=BatchSampler(s, 4, False))
    with pytest.raises(ValueError, match="batch_sampler= with batch_size or drop_last is not accepted"):
        CompressedNeighborLoader(data, [2], batch_sampler=BatchSampler(s, 4, False), batch_size=4)
    loader = CompressedNeighborLoader(data, [2], sampler=[0, 5, 100], batch_size=2)
    with pytest.raises(IndexError, match=r"the sampler drew input position 100; accepted: positions in \[0, 100\)"):
        list(loader)


def test_weight_attr_never_draws_zero_weight_edges_and_follows_the_weights():
    num_nodes = 400
    g = torch.Generator().manual_seed(0)
    dst = torch.arange(num_nodes).repeat_interleave(10)
    src = torch.randint(0, num_nodes, (dst.numel(),), generator=g)
    w = torch.rand(dst.numel(), generator=g)
    w[::3] = 0.0  # a third of the edges can never be drawn
    w[1::10] = 50.0  # one heavy in-edge per node, nearly always drawn
    data = Data(x=torch.randn(num_nodes, 4, generator=g), edge_index=torch.stack([src, dst]), w=w)
    torch.manual_seed(0)
    loader = CompressedNeighborLoader(data, [3], batch_size=50, weight_attr="w", codec="identity")
    e_ids = []
    for batch in loader:
        assert torch.equal(batch.w, w[batch.e_id])  # the weight is an edge attribute like any other
        assert torch.equal(batch.edge_index[1].bincount(minlength=50)[:50], torch.full((50,), 3))
        e_ids.append(batch.e_id)
    e_id = torch.cat(e_ids)
    assert not bool((w[e_id] == 0).any())
    assert (w[e_id] == 50.0).sum().item() > 0.95 * num_nodes  # uniform draws would give 3/10 of that


def test_weight_attr_errors_name_it():
    data = make_graph(100, 500)
    with pytest.raises(ValueError, match=r"weight_attr='w' names no edge attribute of shape \(500,\)"):
        CompressedNeighborLoader(data, [2], weight_attr="w")
    data.w = -torch.ones(500)
    with pytest.raises(ValueError, match=r"weight\[0\]=-1.0; accepted: finite weights >= 0"):
        CompressedNeighborLoader(data, [2], weight_attr="w")


def test_bidirectional_subgraph_adds_the_reverse_edges():
    data = make_graph(500, 2500)
    torch.manual_seed(1)
    loader = CompressedNeighborLoader(data, [4, 3], batch_size=64, subgraph_type="bidirectional")
    edges = real_edges(data)
    for batch in loader:
        assert is_undirected(batch.edge_index)
        assert "num_sampled_nodes" not in batch and "num_sampled_edges" not in batch  # as PyG's
        for (u, v), e in zip(global_edges(batch), batch.e_id.tolist()):
            assert (u, v) in edges or (v, u) in edges
            assert tuple(data.edge_index[:, e].tolist()) in ((u, v), (v, u))  # the forward edge's id
        assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
        assert torch.equal(batch.x, data.x[batch.n_id])


@pytest.mark.parametrize("how", ["subgraph_type", "directed"])
def test_induced_subgraph_has_every_edge_among_the_sampled_nodes(how):
    data = make_graph(300, 1500)
    kwargs = {"subgraph_type": "induced"} if how == "subgraph_type" else {"directed": False}
    torch.manual_seed(2)
    with pytest.warns(DeprecationWarning, match="directed=False") if how == "directed" else contextlib.nullcontext():
        loader = CompressedNeighborLoader(data, [3, 2], batch_size=40, **kwargs)
    directional = CompressedNeighborLoader(data, [3, 2], batch_size=40)
    for batch in loader:
        nodes = set(batch.n_id.tolist())
        expected = sorted(e for e in data.edge_index.t().tolist() if e[0] in nodes and e[1] in nodes)
        assert sorted(map(list, global_edges(batch))) == expected
        assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])
    torch.manual_seed(2)
    batch = next(iter(loader))
    torch.manual_seed(2)
    ref = next(iter(directional))
    assert torch.equal(batch.n_id, ref.n_id)  # the same nodes as the directional sample


def test_disjoint_gives_every_seed_its_own_tree():
    data = make_graph(200, 1500)
    edges = real_edges(data)
    seeds = torch.tensor([3, 3, 7, 11])
    loader = CompressedNeighborLoader(data, [3, 2], input_nodes=seeds, batch_size=4, disjoint=True)
    batch = next(iter(loader))
    assert torch.equal(batch.batch[:4], torch.arange(4))  # the repeated seed grows two trees
    assert torch.equal(batch.n_id[:4], seeds)
    assert torch.equal(batch.x, data.x[batch.n_id])
    src, dst = batch.edge_index
    assert torch.equal(batch.batch[src], batch.batch[dst])  # edges stay inside a tree
    assert all(e in edges for e in global_edges(batch))
    for t in range(4):  # within a tree a node appears once
        ids = batch.n_id[batch.batch == t]
        assert ids.unique().numel() == ids.numel()
    assert sum(batch.num_sampled_nodes) == batch.n_id.numel()
    # a node two seeds reach appears in both trees
    assert batch.n_id.numel() > batch.n_id.unique().numel()


def test_node_loader_s_input_id_and_custom_cls():
    data = make_graph(100, 500)
    ids = torch.tensor([5, 9, 20])
    loader = CompressedNeighborLoader(data, [2], input_nodes=ids, batch_size=3, input_id=torch.tensor([7, 8, 9]))
    batch = next(iter(loader))
    assert batch.input_id.tolist() == [7, 8, 9] and batch.n_id[:3].tolist() == [5, 9, 20]
    with pytest.raises(ValueError, match=r"input_id has shape \(2,\); accepted: one id per input node, shape \(3,\)"):
        CompressedNeighborLoader(data, [2], input_nodes=ids, input_id=torch.tensor([1, 2]))
    with pytest.raises(NotImplementedError, match="custom_cls=.* is not supported"):
        CompressedNeighborLoader(data, [2], custom_cls=Data)


def test_dataset_and_collate_fn_are_dropped_as_pyg_s_node_loader_does():
    data = make_graph(100, 500)
    loader = CompressedNeighborLoader(data, [2], batch_size=50, dataset=range(3), collate_fn=lambda b: 1 / 0)
    batches = list(loader)
    assert len(batches) == 2 and all(torch.equal(b.x, data.x[b.n_id]) for b in batches)


def _timed_graph(num_nodes=300, num_edges=3000):
    g = torch.Generator().manual_seed(4)
    return Data(x=torch.randn(num_nodes, 4, generator=g),
                edge_index=torch.randint(0, num_nodes, (2, num_edges), generator=g),
                time=torch.randint(0, 100, (num_nodes,), generator=g),
                etime=torch.randint(0, 100, (num_edges,), generator=g))


@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_temporal_sampling_by_node_time_keeps_neighbours_no_later_than_their_seed(strategy):
    data = _timed_graph()
    torch.manual_seed(3)
    loader = CompressedNeighborLoader(data, [4, 3], batch_size=25, time_attr="time", temporal_strategy=strategy)
    for batch in loader:
        seed_time = batch.time[:batch.batch_size]
        assert torch.equal(batch.batch[:batch.batch_size], torch.arange(batch.batch_size))  # disjoint, as PyG
        assert bool((batch.time <= seed_time[batch.batch]).all())
        assert "seed_time" not in batch  # PyG reports seed_time for an input_time only
        assert torch.equal(batch.x, data.x[batch.n_id])
        assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])
    if strategy == "last":  # the latest allowed in-neighbours: deterministic
        seeds = torch.arange(25)
        again = next(iter(CompressedNeighborLoader(data, [4, 3], batch_size=25, time_attr="time",
                                                   temporal_strategy="last")))
        assert torch.equal(again.n_id, next(iter(loader)).n_id)
        col = again.edge_index[1] < 25
        for s in seeds.tolist()[:5]:
            got = sorted(data.time[again.n_id[again.edge_index[0][col & (again.edge_index[1] == s)]]].tolist())
            src = data.edge_index[0][data.edge_index[1] == s]
            allowed = sorted(t for t in data.time[src].tolist() if t <= data.time[s].item())
            assert got == allowed[-4:]


def test_temporal_sampling_by_edge_time_with_input_time():
    data = _timed_graph()
    ids = torch.arange(0, 300, 3)
    input_time = torch.randint(20, 80, (100,), generator=torch.Generator().manual_seed(1))
    loader = CompressedNeighborLoader(data, [-1, 2], input_nodes=ids, input_time=input_time, batch_size=30,
                                      time_attr="etime")
    assert torch.equal(loader.input_data.time, input_time)
    for batch in loader:
        assert torch.equal(batch.seed_time, input_time[batch.input_id])
        edge_seed = batch.batch[batch.edge_index[1]]
        assert bool((batch.etime <= batch.seed_time[edge_seed]).all())
        assert torch.equal(batch.etime, data.etime[batch.e_id])
    with pytest.raises(ValueError, match=r"input_time has shape \(3,\); accepted: one time per input node"):
        CompressedNeighborLoader(data, [2], input_nodes=ids, input_time=torch.zeros(3), time_attr="time")


def test_edge_time_without_input_time_is_refused_naming_it():
    with pytest.raises(ValueError, match="edge-level temporal sampling needs seed_time .the loader's input_time."):
        CompressedNeighborLoader(_timed_graph(), [2], time_attr="etime")
