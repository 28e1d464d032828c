"""`edge_ids=False`: batches without ``e_id``, everything else as with edge ids (our option, not PyG's: its
loaders always carry ``e_id``; pyg-lib's sampler has ``return_edge_id``), for node and link loaders, homogeneous
and heterogeneous; refused where edge attributes need the ids."""
import pytest
import torch

from ibp_graph.loaders.pyg import CompressedLinkNeighborLoader, CompressedNeighborLoader
from tests.loaders.test_pyg import make_graph
from tests.loaders.test_pyg_hetero import AFF, EMPTY, make_hetero
from tests.loaders.test_pyg_link import BUYS, make_hetero as make_link_hetero, same_batch


def runs(make, data, **kw):
    """The batches of `make(data, edge_ids=True)` and of `make(data, edge_ids=False)`, same seed."""
    out = []
    for edge_ids in (True, False):
        torch.manual_seed(4)
        out.append(list(make(data, edge_ids=edge_ids, device="cpu", **kw)))
    assert len(out[0]) == len(out[1]) > 1
    return out


def check_same_less_e_id(with_ids, without):
    """Every field but e_id equal (and the same fields), e_id in each edge store with edges of one and in none of
    the other."""
    for a, b in zip(with_ids, without):
        has = ["e_id" in s for s in a.edge_stores if s.edge_index.numel()]
        assert has and all(has)
        assert not any("e_id" in s for s in b.edge_stores)
        for s in a.edge_stores:
            del s.e_id
        same_batch(a, b)


def featured_graph():
    data = make_graph(num_nodes=2000, num_edges=16000)
    del data.edge_attr
    data.time = torch.randint(0, 50, (2000,), generator=torch.Generator().manual_seed(1))
    return data


@pytest.mark.parametrize("options", [dict(), dict(subgraph_type="bidirectional"), dict(subgraph_type="induced"),
                                     dict(disjoint=True), dict(time_attr="time"), dict(num_workers=2),
                                     dict(codec="auto", replace=True)], ids=repr)
def test_node_batches_without_edge_ids_are_the_same_less_e_id(options):
    kw = dict(batch_size=400, shuffle=True, codec="identity")
    kw.update(options)
    if "time_attr" in kw:
        kw["input_time"] = None  # the seeds' own times
    check_same_less_e_id(*runs(CompressedNeighborLoader, featured_graph(), num_neighbors=[4, 2], **kw))


@pytest.mark.parametrize("options", [dict(), dict(subgraph_type="induced"), dict(disjoint=True)], ids=repr)
def test_heterogeneous_node_batches_without_edge_ids_are_the_same_less_e_id(options):
    """(PyG's bidirectional conversion of a heterogeneous batch drops e_id with edge ids too.)"""
    data = make_hetero()
    del data[AFF].weight, data[EMPTY].edge_attr
    check_same_less_e_id(*runs(CompressedNeighborLoader, data, num_neighbors=[3, 2], input_nodes="paper",
                               batch_size=200, codec="identity", **options))


@pytest.mark.parametrize("neg", [None, "binary", "triplet"])
def test_link_batches_without_edge_ids_are_the_same_less_e_id(neg):
    data = featured_graph()
    check_same_less_e_id(*runs(CompressedLinkNeighborLoader, data, num_neighbors=[3, 2], batch_size=300,
                               neg_sampling=neg, shuffle=True, codec="identity"))
    hetero = make_link_hetero()
    check_same_less_e_id(*runs(CompressedLinkNeighborLoader, hetero, num_neighbors=[3, 2], batch_size=200,
                               edge_label_index=(BUYS, hetero[BUYS].edge_index[:, :500]), neg_sampling=neg,
                               codec="identity"))


def test_edge_ids_false_is_refused_for_edge_attributes_and_a_non_bool_by_name():
    with pytest.raises(ValueError, match=r"edge_ids=False is not accepted for a graph with edge attributes "
                                         r"\(edge_attr\): batches gather them by edge id"):
        CompressedNeighborLoader(make_graph(), [2], edge_ids=False)
    with pytest.raises(ValueError, match=r"edge attributes \(author__aff__inst\.weight, inst__empty__paper\."
                                         r"edge_attr\)"):
        CompressedNeighborLoader(make_hetero(), [2], input_nodes="paper", edge_ids=False)
    data = featured_graph()
    data.w = torch.rand(data.num_edges)  # weighted sampling: the weights are an edge attribute batches carry
    with pytest.raises(ValueError, match=r"edge attributes \(w\)"):
        CompressedLinkNeighborLoader(data, [2], weight_attr="w", edge_ids=False)
    adj = featured_graph()
    adj.adj_t = torch.sparse_coo_tensor(adj.edge_index.flip(0), torch.ones(adj.num_edges),
                                        (adj.num_nodes, adj.num_nodes), check_invariants=True).to_sparse_csr()
    del adj.edge_index  # the graph as adj_t: its values are gathered by edge id for the batches' adj_t
    with pytest.raises(ValueError, match=r"edge attributes \(adj_t\): .*or the graph without them \(adj_t: the "
                                         r"graph as edge_index\)$"):
        CompressedNeighborLoader(adj, [2], edge_ids=False)
    with pytest.raises(TypeError, match=r"edge_ids='no' is not accepted; use True \(batches carry e_id\) or "
                                        "False"):
        CompressedNeighborLoader(featured_graph(), [2], edge_ids="no")


def test_an_edge_attribute_added_after_construction_is_refused_at_the_next_epoch():
    """The loader reads `data` again at each epoch (as PyG): an edge attribute added since cannot be gathered
    without edge ids, so the epoch raises by name instead of leaving it out of the batches silently."""
    data = featured_graph()
    loader = CompressedNeighborLoader(data, [3], batch_size=500, edge_ids=False, device="cpu", codec="identity")
    first = list(loader)
    data.edge_weight = torch.rand(data.num_edges)
    with pytest.raises(ValueError, match=r"edge_ids=False is not accepted for a graph with edge attributes "
                                         r"\(edge_weight\)"):
        list(loader)
    del data.edge_weight
    again = list(loader)
    assert len(again) == len(first) and all("e_id" not in b and "edge_weight" not in b for b in again)


def test_remote_store_batches_without_edge_ids_are_the_same_less_e_id():
    """PyG's (FeatureStore, GraphStore) backend: batches carry e_id with edge ids and none without."""
    from torch_geometric.testing import MyFeatureStore

    from tests.loaders.test_pyg_inputs import graph_store

    data = featured_graph()
    fs = MyFeatureStore()
    fs.put_tensor(data.x, group_name=None, attr_name="x", index=None)
    gs = graph_store({None: data.edge_index}, "csc", {None: (data.num_nodes, data.num_nodes)})
    check_same_less_e_id(*runs(CompressedNeighborLoader, (fs, gs), num_neighbors=[3, 2], batch_size=400,
                               input_nodes=torch.arange(0, 2000, 3), codec="identity"))
