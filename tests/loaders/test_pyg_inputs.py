"""The input forms of the PyG loaders: PyG's (FeatureStore, GraphStore) remote backend, homogeneous and
heterogeneous, and per-type tables with TypedCSCs (no edge_index), each giving the batches the same graph
gives as a Data / HeteroData; weighted heterogeneous sampling (weight_attr)."""
import numpy as np
import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.testing import MyFeatureStore, MyGraphStore

from ibp_graph.loaders.pyg import CompressedNeighborLoader
from torch_geometric.loader import NeighborLoader
from ibp_graph.sampling.hetero import TypedCSC
from tests.loaders.test_pyg import make_graph
from tests.loaders.test_pyg_hetero import CITES, WRITES, make_hetero


def batches(data, seed=0, **kw):
    torch.manual_seed(seed)
    kw.setdefault("device", "cpu")
    kw.setdefault("codec", "identity")
    return list(CompressedNeighborLoader(data, **kw))


def graph_store(edges: dict, layout: str, sizes: dict) -> MyGraphStore:
    """The edge types' edge_index put into a graph store in `layout` (CSR and CSC from a stable sort)."""
    store = MyGraphStore()
    for e, ei in edges.items():
        n_src, n_dst = sizes[e]
        if layout == "coo":
            store.put_edge_index((ei[0], ei[1]), edge_type=e, layout="coo", size=(n_src, n_dst))
        elif layout == "csr":
            order = torch.sort(ei[0], stable=True).indices
            rowptr = torch.zeros(n_src + 1, dtype=torch.int64)
            rowptr[1:] = torch.bincount(ei[0], minlength=n_src).cumsum(0)
            store.put_edge_index((rowptr, ei[1, order]), edge_type=e, layout="csr", size=(n_src, n_dst))
        else:
            order = torch.sort(ei[1], stable=True).indices
            colptr = torch.zeros(n_dst + 1, dtype=torch.int64)
            colptr[1:] = torch.bincount(ei[1], minlength=n_dst).cumsum(0)
            store.put_edge_index((ei[0, order], colptr), edge_type=e, layout="csc", size=(n_src, n_dst))
    return store


def edge_order(ei: torch.Tensor, layout: str) -> torch.Tensor:
    """The edge_index column of each edge id the graph store's layout gives (PyG's perm)."""
    if layout == "coo":
        return torch.arange(ei.shape[1])
    return torch.sort(ei[0] if layout == "csr" else ei[1], stable=True).indices


# -- homogeneous (FeatureStore, GraphStore) -----------------------------------------------------------------

@pytest.mark.parametrize("layout", ["coo", "csr", "csc"])
def test_homogeneous_stores_give_the_batches_of_the_same_data(layout):
    data = make_graph(num_nodes=400, num_edges=3000)
    fs = MyFeatureStore()
    fs.put_tensor(data.x, group_name=None, attr_name="x", index=None)
    fs.put_tensor(data.y, group_name=None, attr_name="y", index=None)
    gs = graph_store({None: data.edge_index}, layout, {None: (400, 400)})
    seeds = torch.arange(0, 400, 3)
    kw = dict(num_neighbors=[4, 3], input_nodes=seeds, batch_size=40, shuffle=True)
    # the store's edge ids are positions in its layout (PyG's perm): the same graph as a Data lists its edges
    # in that order
    perm = edge_order(data.edge_index, layout)
    same_order = Data(x=data.x, y=data.y, edge_index=data.edge_index[:, perm], edge_attr=data.edge_attr[perm])
    want, got = batches(same_order, **kw), batches((fs, gs), **kw)
    assert len(want) == len(got) == 4
    if layout != "csr":  # COO and CSC keep each node's in-edges in edge_index order: the Data's own batches
        for a, b in zip(batches(data, **kw), got):
            assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.e_id, perm[b.e_id])
    for a, b in zip(want, got):
        for key in ("x", "y", "edge_index", "n_id", "e_id", "input_id", "num_sampled_nodes", "num_sampled_edges"):
            assert torch.equal(torch.as_tensor(a[key]), torch.as_tensor(b[key])), key
        src, dst = b.n_id[b.edge_index]
        assert torch.equal(data.edge_index[:, perm[b.e_id]], torch.stack([src, dst]))
        assert b.batch_size == a.batch_size
        # what PyG's filter_custom_store puts in a batch: the store's node attributes and num_nodes, no
        # edge or graph-level attributes
        assert b.num_nodes == b.n_id.numel() and "edge_attr" not in b
        assert set(b.keys()) == {"x", "y", "edge_index", "n_id", "e_id", "input_id", "batch_size",
                                 "num_sampled_nodes", "num_sampled_edges", "num_nodes"}


def test_homogeneous_stores_with_workers_and_auto_codec_are_lossless():
    data = make_graph(num_nodes=400, num_edges=3000)
    fs = MyFeatureStore()
    fs.put_tensor(data.x, group_name=None, attr_name="x", index=None)
    gs = graph_store({None: data.edge_index}, "coo", {None: (400, 400)})
    kw = dict(num_neighbors=[4], input_nodes=torch.arange(400), batch_size=100)
    want = batches((fs, gs), **kw)
    got = batches((fs, gs), codec="auto", num_workers=2, **kw)
    for a, b in zip(want, got):
        assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(b.x, data.x[b.n_id])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_feature_store_with_more_rows_than_the_graph_has_nodes_is_read_as_pyg_reads_it(num_workers):
    # PyG takes the node count from the graph store's size and reads the rows of sampled ids only (its own
    # test_custom_neighbor_loader stores 200 rows for a 100-node graph); ours refused any other row count
    data = make_graph(num_nodes=200, num_edges=600)
    fs = MyFeatureStore()
    fs.put_tensor(data.x, group_name=None, attr_name="x", index=None)  # 200 rows
    fs.put_tensor(data.y, group_name=None, attr_name="y", index=None)
    keep = (data.edge_index < 100).all(0)
    gs = graph_store({None: data.edge_index[:, keep]}, "coo", {None: (100, 100)})  # 100 nodes
    loader = CompressedNeighborLoader((fs, gs), [-1], input_nodes=torch.arange(100), batch_size=20,
                                      num_workers=num_workers, device="cpu")
    seen = 0
    for batch in loader:
        assert int(batch.n_id.max()) < 100
        assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.y, data.y[batch.n_id])
        seen += batch.batch_size
    assert seen == 100


def test_store_errors_name_what_is_wrong():
    data = make_graph(num_nodes=100, num_edges=300)
    fs = MyFeatureStore()
    fs.put_tensor(data.x, group_name=None, attr_name="x", index=None)
    gs = graph_store({None: data.edge_index}, "coo", {None: (100, 100)})
    with pytest.raises(NotImplementedError, match="weight_attr='w' with \\(FeatureStore, GraphStore\\) data"):
        CompressedNeighborLoader((fs, gs), [2], weight_attr="w")
    short = MyFeatureStore()
    short.put_tensor(data.x[:50], group_name=None, attr_name="x", index=None)
    with pytest.raises(ValueError, match="group None has 50 rows but the graph store's size gives 100 nodes"):
        CompressedNeighborLoader((short, gs), [2])
    nosize = MyGraphStore()
    nosize.put_edge_index((data.edge_index[0], data.edge_index[1]), edge_type=None, layout="coo")
    with pytest.raises(ValueError, match="node type None: neither an edge attribute's size nor a feature tensor"):
        CompressedNeighborLoader((MyFeatureStore(), nosize), [2])
    bad = MyGraphStore()
    bad.put_edge_index((data.edge_index[0], torch.zeros(7, dtype=torch.int64)), edge_type=None, layout="csc",
                       size=(100, 100))
    with pytest.raises(ValueError, match="edge_type=None \\(csc\\): colptr has shape \\(7,\\); accepted: \\(101,\\)"):
        CompressedNeighborLoader((fs, bad), [2])


def test_homogeneous_stores_sample_temporally_by_a_node_time():
    data = make_graph(num_nodes=300, num_edges=2000)
    data.time = torch.randint(0, 40, (300,), generator=torch.Generator().manual_seed(2))
    fs = MyFeatureStore()
    for key in ("x", "time"):
        fs.put_tensor(data[key], group_name=None, attr_name=key, index=None)
    gs = graph_store({None: data.edge_index}, "coo", {None: (300, 300)})
    kw = dict(num_neighbors=[3, 2], input_nodes=torch.arange(0, 300, 4), batch_size=25, time_attr="time")
    for a, b in zip(batches(data, **kw), batches((fs, gs), **kw)):
        for key in ("n_id", "e_id", "edge_index", "batch", "time", "x"):
            assert torch.equal(a[key], b[key]), key
    with pytest.raises(ValueError, match="time_attr='t' names neither"):
        CompressedNeighborLoader((fs, gs), [2], time_attr="t")


# -- heterogeneous (FeatureStore, GraphStore) ---------------------------------------------------------------

def hetero_stores(data: HeteroData, layout: str):
    fs = MyFeatureStore()
    for t in data.node_types:
        for key in data[t].node_attrs():
            fs.put_tensor(data[t][key], group_name=t, attr_name=key, index=None)
    sizes = {e: (data[e[0]].num_nodes, data[e[2]].num_nodes) for e in data.edge_types}
    return fs, graph_store({e: data[e].edge_index for e in data.edge_types}, layout, sizes)


@pytest.mark.parametrize("layout", ["coo", "csc"])
def test_heterogeneous_stores_give_the_batches_of_the_same_hetero_data(layout):
    data = make_hetero(papers=300, authors=400, insts=20)
    kw = dict(num_neighbors=[3, 2], input_nodes=("paper", data["paper"].train_mask), batch_size=32, shuffle=True)
    stores = hetero_stores(data, layout)
    loader = CompressedNeighborLoader(stores, **{**kw, "device": "cpu"})
    assert isinstance(loader, NeighborLoader) and type(loader) is CompressedNeighborLoader and repr(loader) == "CompressedNeighborLoader()"
    want, got = batches(data, **kw), batches(stores, **kw)
    assert len(want) == len(got) > 1
    for a, b in zip(want, got):
        for t in data.node_types:
            for key in ("n_id", "num_sampled_nodes", *data[t].node_attrs()):
                assert torch.equal(torch.as_tensor(a[t][key]), torch.as_tensor(b[t][key])), (t, key)
            # PyG's filter_custom_hetero_store: num_nodes for the types with features in the store
            assert ("num_nodes" in b[t]) == (t != "inst")
        for e in data.edge_types:
            assert torch.equal(a[e].edge_index, b[e].edge_index)
            assert torch.equal(edge_order(data[e].edge_index, layout)[b[e].e_id], a[e].e_id)
            assert a[e].num_sampled_edges == b[e].num_sampled_edges
            assert set(b[e].keys()) == {"edge_index", "e_id", "num_sampled_edges"}  # no edge attributes
        assert torch.equal(a["paper"].input_id, b["paper"].input_id)
        assert a["paper"].batch_size == b["paper"].batch_size
        assert "name" not in b  # no graph-level attributes in a store


def test_heterogeneous_stores_sample_temporally_by_a_node_time_and_refuse_weights():
    data = make_hetero(papers=300, authors=400, insts=20)
    g = torch.Generator().manual_seed(3)
    for t, n in (("paper", 300), ("author", 400), ("inst", 20)):
        data[t].time = torch.randint(0, 50, (n,), generator=g)
    kw = dict(num_neighbors=[3, 2], input_nodes=("paper", torch.arange(0, 300, 3)), batch_size=25,
              time_attr="time")
    stores = hetero_stores(data, "coo")
    for a, b in zip(batches(data, **kw), batches(stores, **kw)):
        for t in data.node_types:
            assert torch.equal(a[t].n_id, b[t].n_id) and torch.equal(a[t].batch, b[t].batch)
            assert torch.equal(a[t].time, b[t].time)
        for e in data.edge_types:
            assert torch.equal(a[e].edge_index, b[e].edge_index) and torch.equal(a[e].e_id, b[e].e_id)
    with pytest.raises(NotImplementedError, match="weight_attr='w' with \\(FeatureStore, GraphStore\\) data"):
        CompressedNeighborLoader(stores, [2], input_nodes="paper", weight_attr="w")


# -- heterogeneous tables: (features, {edge type: TypedCSC}[, num_nodes]) -----------------------------------

def hetero_tables(data: HeteroData, with_counts: bool):
    features = {t: {k: data[t][k] for k in data[t].node_attrs()} for t in data.node_types
                if data[t].node_attrs()}
    graph = {e: TypedCSC.from_edge_index(data[e].edge_index, data[e[0]].num_nodes, data[e[2]].num_nodes)
             for e in data.edge_types}
    counts = {t: data[t].num_nodes for t in data.node_types}
    return (features, graph, counts) if with_counts else (features, graph)


@pytest.mark.parametrize("with_counts", [False, True])
def test_typed_csc_tables_give_the_batches_of_the_same_hetero_data(with_counts):
    data = make_hetero(papers=300, authors=400, insts=20)
    del data[("inst", "empty", "paper")]  # no edges and no features: a type the tables cannot name
    kw = dict(num_neighbors=[3, 2], input_nodes=("paper", torch.arange(0, 300, 2)), batch_size=40)
    want, got = batches(data, **kw), batches(hetero_tables(data, with_counts), codec="auto", **kw)
    assert len(want) == len(got) == 4
    for a, b in zip(want, got):
        for t in data.node_types:
            for key in ("n_id", "num_sampled_nodes", *data[t].node_attrs()):
                assert torch.equal(torch.as_tensor(a[t][key]), torch.as_tensor(b[t][key])), (t, key)
            assert ("num_nodes" in b[t]) == with_counts
        for e in data.edge_types:
            for key in ("edge_index", "e_id"):
                assert torch.equal(a[e][key], b[e][key])
        assert torch.equal(a["paper"].input_id, b["paper"].input_id)


def test_typed_csc_tables_serve_temporal_sampling_from_a_node_time():
    data = make_hetero(papers=300, authors=400, insts=20)
    del data[("inst", "empty", "paper")]
    g = torch.Generator().manual_seed(3)
    data["paper"].time = torch.randint(0, 50, (300,), generator=g)
    data["author"].time = torch.randint(0, 50, (400,), generator=g)
    data["inst"].time = torch.randint(0, 50, (20,), generator=g)
    kw = dict(num_neighbors=[3, 2], input_nodes=("paper", torch.arange(0, 300, 3)), batch_size=25,
              time_attr="time")
    want, got = batches(data, **kw), batches(hetero_tables(data, True), **kw)
    for a, b in zip(want, got):
        for t in data.node_types:
            assert torch.equal(a[t].n_id, b[t].n_id) and torch.equal(a[t].batch, b[t].batch)
        for e in data.edge_types:
            assert torch.equal(a[e].edge_index, b[e].edge_index) and torch.equal(a[e].e_id, b[e].e_id)


def test_typed_csc_table_errors_name_the_argument():
    data = make_hetero(papers=60, authors=80, insts=5)
    del data[("inst", "empty", "paper")]
    features, graph, counts = hetero_tables(data, True)
    L = CompressedNeighborLoader
    with pytest.raises(ValueError, match="graph\\[\\('author', 'aff', 'inst'\\)\\] names node type 'inst', which "
                                         "num_nodes lacks"):
        L((features, graph, {"paper": 60, "author": 80}), [2], input_nodes="paper")
    with pytest.raises(ValueError, match="features\\['paper'\\]\\['x'\\] gives node type 'paper' 60 nodes; "
                                         "elsewhere it has 61"):
        L((features, graph, {**counts, "paper": 61}), [2], input_nodes="paper")
    with pytest.raises(TypeError, match="data\\[1\\] \\(graph\\) must map \\(src, rel, dst\\) edge types to "
                                        "TypedCSCs, got \\('paper', 'cites', 'paper'\\): Tensor"):
        L((features, {CITES: data[CITES].edge_index}), [2], input_nodes="paper")
    with pytest.raises(ValueError, match="num_nodes\\['paper'\\]=-1 is not accepted"):
        L((features, graph, {**counts, "paper": -1}), [2], input_nodes="paper")
    with pytest.raises(TypeError, match="features\\['paper'\\]\\['tag'\\] is a str"):
        L(({"paper": {"tag": "x"}}, graph, counts), [2], input_nodes="paper")


# -- weighted heterogeneous sampling ------------------------------------------------------------------------

def test_hetero_weight_attr_never_draws_zero_weight_edges_and_follows_the_weights():
    data = make_hetero(papers=300, authors=400, insts=20)
    g = torch.Generator().manual_seed(5)
    w = torch.rand(data[CITES].edge_index.shape[1], generator=g)
    w[torch.rand(w.shape, generator=g) < 0.4] = 0.0
    data[CITES].w = w
    loader = CompressedNeighborLoader(data, [2], input_nodes=("paper", None), batch_size=50, weight_attr="w",
                                      codec="identity", device="cpu")
    drawn = []
    for batch in loader:
        assert torch.equal(batch[CITES].w, w[batch[CITES].e_id])  # an edge attribute like any other
        drawn.append(batch[CITES].e_id)
    drawn = torch.cat(drawn)
    # a fan-out at least the in-degree takes every in-edge (PyG's rule); below it, zero weights never come out
    dst = data[CITES].edge_index[1]
    deg = torch.bincount(dst, minlength=300)
    sampled = drawn[deg[dst[drawn]] > 2]
    assert sampled.numel() > 100 and bool((w[sampled] > 0).all())
    # heavier edges are drawn more often than light ones (expected ~2x between the halves)
    heavy = (w[sampled] > 0.5).sum().item()
    light = ((w[sampled] > 0) & (w[sampled] <= 0.5)).sum().item()
    assert heavy > 1.3 * light
    # the edge types without the attribute are sampled as without weight_attr (one hop: independent streams)
    kw = dict(num_neighbors=[2], input_nodes=("paper", None), batch_size=50)
    for a, b in zip(batches(data, weight_attr="w", **kw), batches(data, **kw)):
        assert torch.equal(a[WRITES].e_id, b[WRITES].e_id)
        assert not torch.equal(a[CITES].e_id, b[CITES].e_id) or a[CITES].e_id.numel() == 0


def test_hetero_weight_attr_with_time_attr_is_refused():
    data = make_hetero(papers=60, authors=80, insts=5)
    data[CITES].w = torch.ones(data[CITES].edge_index.shape[1])
    data["paper"].time = torch.zeros(60, dtype=torch.int64)
    with pytest.raises(ValueError, match="weight with temporal sampling .* is not accepted"):
        CompressedNeighborLoader(data, [2], input_nodes="paper", weight_attr="w", time_attr="time")


def test_a_prepared_folder_is_served_from_its_tables_as_its_hetero_data(tmp_path):
    from ibp_graph.data import maggen
    from ibp_graph.data.hetero import HeteroPreparedDataset
    from ibp_graph.data.maggen import MagSpec

    spec = MagSpec(num_papers=600, num_authors=800, num_institutions=20, num_fields=60, num_classes=5, seed=1)
    ds = HeteroPreparedDataset.load(maggen.generate(spec, tmp_path / "m", progress=False))
    kw = dict(num_neighbors=[3, 2], input_nodes=("paper", ds.split["train"]), batch_size=64, shuffle=True)
    want, got = batches(ds.to_hetero_data(), **kw), batches(ds.tables(), **kw)
    assert len(want) == len(got) > 1
    for a, b in zip(want, got):
        for t in ds.node_types:
            assert list(a[t].keys()) == list(b[t].keys())
            for key in a[t].keys():
                assert torch.equal(torch.as_tensor(a[t][key]), torch.as_tensor(b[t][key])), (t, key)
        for e in ds.edge_types:
            assert torch.equal(a[e].edge_index, b[e].edge_index) and a[e].num_sampled_edges == b[e].num_sampled_edges
            # to_hetero_data numbers edges by CSC position; the tables keep the folder's edge ids
            assert torch.equal(b[e].e_id, torch.from_numpy(np.asarray(ds.relations[e].e_id, dtype=np.int64))[a[e].e_id])


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_sparse_attributes_are_refused_by_name_with_what_is_accepted(layout):
    """PyG gathers rows of a sparse node attribute with index_select; the workers gather and compress dense
    rows, so a sparse table is refused at construction, naming it (it failed in torch's contiguous())."""
    def sparse(t):
        return t.to_sparse() if layout == "coo" else t.to_sparse_csr()

    data = make_graph(num_nodes=200, num_edges=1000)
    data.x = sparse(data.x)
    with pytest.raises(TypeError, match=r"data\.x is a torch\.sparse_\w+ tensor.*accepted: a dense \(strided\) "
                                        r"tensor, e\.g\. data\.x\.to_dense\(\)"):
        CompressedNeighborLoader(data, num_neighbors=[2], batch_size=8)
    data = make_graph(num_nodes=200, num_edges=1000)
    data.edge_attr = sparse(data.edge_attr)
    with pytest.raises(TypeError, match=r"data\.edge_attr is a torch\.sparse_\w+ tensor"):
        CompressedNeighborLoader(data, num_neighbors=[2], batch_size=8)
    hetero = make_hetero(papers=100, authors=120, insts=10)
    hetero["paper"].x = sparse(hetero["paper"].x)
    with pytest.raises(TypeError, match=r"data\['paper'\]\.x is a torch\.sparse_\w+ tensor"):
        CompressedNeighborLoader(hetero, num_neighbors=[2], input_nodes="paper", batch_size=8)
