"""CompressedNeighborLoader on a HeteroData: PyG's heterogeneous NeighborLoader contract, per type,
lossless batches with any codec and worker count, input_id semantics, errors, and a to_hetero model."""
import gc

import numpy as np

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import HeteroData
from torch_geometric.nn import GraphSAGE, to_hetero

from ibp_graph.loaders.pyg import CompressedNeighborLoader
from torch_geometric.loader import NeighborLoader
from tests.sampling.test_hetero import check_contract
from ibp_graph.sampling.hetero import HeteroSamplerOutput

CITES, WRITES, REV, AFF, EMPTY = (("paper", "cites", "paper"), ("author", "writes", "paper"),
                                  ("paper", "rev_writes", "author"), ("author", "aff", "inst"),
                                  ("inst", "empty", "paper"))


def make_hetero(papers=900, authors=1200, insts=40, dim=16, seed=0):
    """An ogbn-mag-like graph whose feature rows name their node (column 0 is the node id): dense
    float papers, small-integer authors, featureless institutions, an edge type without edges."""
    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    x = torch.randn(papers, dim, generator=g)
    x[:, 0] = torch.arange(papers, dtype=torch.float32)
    data["paper"].x = x
    data["paper"].y = torch.randint(0, 5, (papers,), generator=g)
    data["paper"].train_mask = torch.rand(papers, generator=g) < 0.3
    ax = torch.randint(0, 3, (authors, dim), generator=g).float()
    ax[:, 0] = torch.arange(authors, dtype=torch.float32)
    data["author"].x = ax
    data["inst"].num_nodes = insts
    data[CITES].edge_index = torch.randint(0, papers, (2, 5000), generator=g)
    data[WRITES].edge_index = torch.stack([torch.randint(0, authors, (3000,), generator=g),
                                           torch.randint(0, papers, (3000,), generator=g)])
    data[REV].edge_index = data[WRITES].edge_index.flip(0)
    data[AFF].edge_index = torch.stack([torch.arange(authors), torch.arange(authors) % insts])
    data[AFF].weight = torch.rand(authors, 2, generator=g)
    data[EMPTY].edge_index = torch.zeros(2, 0, dtype=torch.int64)
    data[EMPTY].edge_attr = torch.zeros(0, 3)
    data.name = "mag-like"  # graph-level: every batch keeps it
    return data


def check_batch(batch, data, fanouts, input_nodes):
    """The contract per type, bit for bit, against the graph the loader sampled."""
    assert isinstance(batch, HeteroData)
    assert set(batch.node_types) == set(data.node_types) and set(batch.edge_types) == set(data.edge_types)
    for t in data.node_types:
        n_id = batch[t].n_id
        for key in data[t].node_attrs():
            assert torch.equal(batch[t][key], data[t][key][n_id])  # bit for bit
        if "x" in data[t]:
            assert torch.equal(batch[t].x[:, 0].long(), n_id)  # the features name their node
        else:
            assert "x" not in batch[t]  # a type without features gets none (as PyG)
    for e in data.edge_types:
        assert batch[e].edge_index.shape == (2, batch[e].e_id.numel())
        for key in data[e].edge_attrs():
            if key != "edge_index":
                assert torch.equal(batch[e][key], data[e][key][batch[e].e_id])
    seeds = batch["paper"].n_id[: batch["paper"].batch_size]
    assert torch.equal(seeds, input_nodes[batch["paper"].input_id]) or torch.equal(seeds, batch["paper"].input_id)
    out = HeteroSamplerOutput(
        node={t: batch[t].n_id for t in data.node_types},
        row={e: batch[e].edge_index[0] for e in data.edge_types},
        col={e: batch[e].edge_index[1] for e in data.edge_types},
        edge={e: batch[e].e_id for e in data.edge_types},
        num_sampled_nodes={t: batch[t].num_sampled_nodes for t in data.node_types},
        num_sampled_edges={e: batch[e].num_sampled_edges for e in data.edge_types})
    num_nodes = {t: data[t].num_nodes for t in data.node_types}
    ei = {e: data[e].edge_index for e in data.edge_types}
    check_contract(out, num_nodes, ei, "paper", seeds, fanouts)
    assert batch.name == "mag-like"


def batches(data, seed=0, **kw):
    torch.manual_seed(seed)
    kw.setdefault("device", "cpu")
    return list(CompressedNeighborLoader(data, **kw))


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for t in x.node_types:
            assert list(x[t].keys()) == list(y[t].keys())
            for k in x[t].keys():
                assert torch.equal(x[t][k], y[t][k]) if torch.is_tensor(x[t][k]) else x[t][k] == y[t][k]
        for e in x.edge_types:
            assert list(x[e].keys()) == list(y[e].keys())
            for k in x[e].keys():
                assert torch.equal(x[e][k], y[e][k]) if torch.is_tensor(x[e][k]) else x[e][k] == y[e][k]


@pytest.mark.parametrize("codec", ["auto", "identity"])
def test_batches_follow_pyg_hetero_semantics(codec):
    data = make_hetero()
    input_nodes = torch.arange(0, 900, 3)
    loader = CompressedNeighborLoader(data, [4, 3], input_nodes=("paper", input_nodes), batch_size=64,
                                      shuffle=True, codec=codec, device="cpu")
    assert isinstance(loader, NeighborLoader) and type(loader) is CompressedNeighborLoader
    assert len(loader) == 5
    seen = []
    for batch in loader:
        check_batch(batch, data, {e: [4, 3] for e in data.edge_types}, input_nodes)
        seen.append(batch["paper"].input_id)
        # the fields of PyG's NeighborLoader, per type (pyg-lib: num_sampled_* included)
        assert set(batch["paper"].keys()) == {"x", "y", "train_mask", "n_id", "num_sampled_nodes",
                                              "input_id", "batch_size"}
        assert set(batch["author"].keys()) == {"x", "n_id", "num_sampled_nodes"}
        assert set(batch["inst"].keys()) == {"num_nodes", "n_id", "num_sampled_nodes"}
        assert batch["inst"].num_nodes == batch["inst"].n_id.numel()
        assert set(batch[CITES].keys()) == {"edge_index", "e_id", "num_sampled_edges"}
        assert set(batch[AFF].keys()) == {"edge_index", "weight", "e_id", "num_sampled_edges"}
        assert batch[EMPTY].edge_index.shape == (2, 0) and batch[EMPTY].edge_attr.shape == (0, 3)
        assert batch["paper"].batch_size == batch["paper"].input_id.numel() <= 64
    assert torch.equal(torch.cat(seen).sort().values, torch.arange(300))  # every seed once
    assert loader.stats.batches == 5
    groups = set(loader.stats.sent_bytes)
    assert "int64[*]" in groups and "bool[*]" in groups
    if codec == "identity":
        assert loader.stats.fraction == pytest.approx(1.0, abs=0.02)


def test_identity_and_auto_and_workers_give_identical_batches():
    data = make_hetero()
    kw = dict(num_neighbors=[3, 2], input_nodes=("paper", torch.arange(400)), batch_size=100, shuffle=True)
    ref = batches(data, codec="identity", **kw)
    same(ref, batches(data, codec="auto", **kw))
    same(ref, batches(data, codec="auto", num_workers=2, **kw))
    same(ref, batches(data, codec="ebp", num_workers=2, persistent_workers=True, **kw))
    # filtering (gather + encode) in the main process: the same batches
    main = CompressedNeighborLoader(data, codec="auto", num_workers=2, filter_per_worker=False, device="cpu", **kw)
    assert not main.filter_per_worker
    torch.manual_seed(0)
    same(ref, list(main))
    assert main.stats.batches == len(ref) and main.stats.seconds["encode"] > 0
    assert not torch.equal(batches(data, seed=1, codec="identity", **kw)[0]["paper"].n_id, ref[0]["paper"].n_id)


def test_workers_write_batches_into_the_slot_ring_and_kept_batches_stay_intact():
    data = make_hetero()
    kw = dict(num_neighbors=[3, 2], input_nodes=("paper", torch.arange(600)), batch_size=40, shuffle=True)
    ref = batches(data, codec="auto", **kw)  # in the main process
    torch.manual_seed(0)
    loader = CompressedNeighborLoader(data, codec="auto", num_workers=2, device="cpu", **kw)
    kept = list(loader)  # 15 batches held at once: more than a worker's slots
    same(ref, kept)
    claims = loader._producer.ring.counters[:2, :, 0]
    assert int(claims.sum()) > 0 and int(loader._producer.ring.counters[2:].abs().sum()) == 0
    del kept  # their slots are free again
    gc.collect()
    torch.manual_seed(0)
    for a, b in zip(ref, loader):  # batches not kept: their slots are written again
        same([a], [b])
    assert int(loader._producer.ring.counters[:2, :, 0].max()) > 1


def test_dict_and_list_num_neighbors_agree():
    data = make_hetero()
    kw = dict(input_nodes="paper", batch_size=300)
    as_list = batches(data, num_neighbors=[3, 2], **kw)
    as_dict = batches(data, num_neighbors={e: [3, 2] for e in data.edge_types}, **kw)
    same(as_list, as_dict)
    fan = {CITES: [5, 0], WRITES: [1, 2], REV: [-1, 1], AFF: [2, 2], EMPTY: [1, 1]}
    for batch in batches(data, num_neighbors=fan, **kw):
        check_batch(batch, data, fan, torch.arange(900))
        assert batch[CITES].num_sampled_edges[1] == 0


def test_input_id_is_node_ids_for_a_mask_and_positions_otherwise():
    data = make_hetero()
    mask = data["paper"].train_mask
    ids = mask.nonzero().view(-1)
    by_mask = batches(data, num_neighbors=[2], input_nodes=("paper", mask), batch_size=50)
    by_ids = batches(data, num_neighbors=[2], input_nodes=("paper", ids), batch_size=50)
    assert torch.equal(torch.cat([b["paper"].input_id for b in by_mask]), ids)  # node ids (PyG)
    assert torch.equal(torch.cat([b["paper"].input_id for b in by_ids]), torch.arange(ids.numel()))  # positions
    for a, b in zip(by_mask, by_ids):
        assert torch.equal(a["paper"].n_id, b["paper"].n_id)
        assert torch.equal(a["paper"].n_id[: a["paper"].batch_size], a["paper"].input_id)
    as_list = batches(data, num_neighbors=[2], input_nodes=("paper", ids.tolist()), batch_size=50)
    same(as_list, by_ids)


def test_features_are_grouped_across_types_or_split_where_types_differ():
    data = make_hetero(papers=3000, authors=3000, dim=32)
    loader = CompressedNeighborLoader(data, [2], input_nodes="paper", batch_size=500, device="cpu")
    report = loader.split_report["float32[32]"]
    assert report["members"] == ["paper.x", "author.x"]
    # dense float papers and small-integer authors: separate codecs send fewer bytes
    assert report["split"] and report["per_type_fraction"] < report["pooled_fraction"] * 0.98
    assert {"float32[32]@paper.x", "float32[32]@author.x"} <= set(loader.codecs)
    assert "float32[32]" not in loader.codecs
    for batch in loader:
        check_batch(batch, data, {e: [2] for e in data.edge_types}, torch.arange(3000))
    assert {"float32[32]@paper.x", "float32[32]@author.x"} <= set(loader.stats.sent_bytes)
    # alike types share one group and one codec
    data["author"].x = data["paper"].x.clone()[:3000]
    data["author"].x[:, 0] = torch.arange(3000, dtype=torch.float32)
    loader = CompressedNeighborLoader(data, [2], input_nodes="paper", batch_size=500, device="cpu")
    assert not loader.split_report["float32[32]"]["split"] and "float32[32]" in loader.codecs
    for batch in loader:
        check_batch(batch, data, {e: [2] for e in data.edge_types}, torch.arange(3000))


def test_numpy_and_memmap_attributes(tmp_path):
    data = make_hetero()
    x = data["author"].x.numpy()
    mm = np.lib.format.open_memmap(tmp_path / "a.npy", mode="w+", dtype=x.dtype, shape=x.shape)
    mm[:] = x
    mm.flush()
    data["author"].x = np.load(tmp_path / "a.npy", mmap_mode="r")
    data[AFF].weight = data[AFF].weight.numpy()
    for batch in batches(data, num_neighbors=[3, 3], input_nodes="paper", batch_size=300):
        assert torch.equal(batch["author"].x, torch.from_numpy(x)[batch["author"].n_id])
        assert torch.equal(batch[AFF].weight, torch.from_numpy(data[AFF].weight)[batch[AFF].e_id])


def test_errors_name_the_argument_and_value():
    data = make_hetero()
    L = CompressedNeighborLoader
    with pytest.raises(ValueError, match="node type 'venue', which the graph does not have"):
        L(data, [2], input_nodes=("venue", None))
    with pytest.raises(ValueError, match="input_nodes=None is not accepted for a HeteroData"):
        L(data, [2])
    with pytest.raises(IndexError, match="'paper' node 900, outside \\[0, 900\\)"):
        L(data, [2], input_nodes=("paper", torch.tensor([0, 900])))
    with pytest.raises(ValueError, match="boolean mask of shape \\(5,\\)"):
        L(data, [2], input_nodes=("paper", torch.ones(5, dtype=torch.bool)))
    with pytest.raises(ValueError, match="no fan-outs for edge type \\('author', 'aff', 'inst'\\)"):
        L(data, {e: [2] for e in data.edge_types if e != AFF}, input_nodes="paper")
    with pytest.raises(ValueError, match="names edge type \\('a', 'b', 'c'\\)"):
        L(data, {**{e: [2] for e in data.edge_types}, ("a", "b", "c"): [1]}, input_nodes="paper")
    with pytest.raises(ValueError, match="hops must be the same across all edge types"):
        L(data, {**{e: [2] for e in data.edge_types}, CITES: [2, 2]}, input_nodes="paper")
    with pytest.raises(ValueError, match="codec='zstd' is not accepted"):
        L(data, [2], input_nodes="paper", codec="zstd")
    with pytest.raises(ValueError, match="subgraph_type='sideways' is not accepted"):
        L(data, [2], input_nodes="paper", subgraph_type="sideways")
    with pytest.raises(ValueError, match="disjoint=True with subgraph_type='induced' is not accepted"):
        L(data, [2], input_nodes="paper", disjoint=True, subgraph_type="induced")
    with pytest.raises(ValueError, match="input_time is given but time_attr is None"):
        L(data, [2], input_nodes="paper", input_time=torch.zeros(900))
    with pytest.raises(ValueError, match="time_attr='t' is neither a node-level nor an edge-level"):
        L(data, [2], input_nodes="paper", time_attr="t")
    with pytest.raises(ValueError, match="weight_attr='w' is an attribute of no edge type"):
        L(data, [2], input_nodes="paper", weight_attr="w")
    with pytest.raises(ValueError, match="weight\\[\\('author', 'aff', 'inst'\\)\\]: weight has shape \\(1200, 2\\)"):
        L(data, [2], input_nodes="paper", weight_attr="weight")
    with pytest.raises(ValueError, match="features='gpu' is not accepted"):
        L(data, [2], input_nodes="paper", features="gpu")
    bad = make_hetero()
    bad[CITES].edge_index = torch.tensor([[0], [900]])
    with pytest.raises(ValueError, match="data\\[\\('paper', 'cites', 'paper'\\)\\].edge_index: .*node id 900"):
        L(bad, [2], input_nodes="paper")


def test_worker_and_auto_feature_modes_give_the_same_batches():
    data = make_hetero()
    kw = dict(num_neighbors=[3, 2], input_nodes=("paper", torch.arange(300)), batch_size=100, shuffle=True)
    same(batches(data, features="worker", **kw), batches(data, features="auto", **kw))


def test_num_neighbors_as_pyg_num_neighbors_with_a_default():
    from torch_geometric.sampler.base import NumNeighbors

    data = make_hetero()
    fan = NumNeighbors({CITES: [4]}, default=[1])
    for batch in batches(data, num_neighbors=fan, input_nodes="paper", batch_size=300):
        check_batch(batch, data, {e: [4] if e == CITES else [1] for e in data.edge_types}, torch.arange(900))


def test_to_hetero_graphsage_trains_on_the_batches():
    torch.manual_seed(0)
    data = make_hetero()
    data["author"].x = data["author"].x[:, :8]  # types may differ in width; lazy layers adapt
    data["inst"].x = torch.zeros(40, 4)  # to_hetero needs an input for every type it updates
    model = to_hetero(GraphSAGE((-1, -1), 32, num_layers=2, out_channels=5), data.metadata(), aggr="sum")
    loader = CompressedNeighborLoader(data, [4, 3], input_nodes=("paper", data["paper"].train_mask),
                                      batch_size=64, shuffle=True, device="cpu")
    batch = next(iter(loader))
    with torch.no_grad():
        model(batch.x_dict, batch.edge_index_dict)  # initialise the lazy layers
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for batch in loader:
        opt.zero_grad()
        out = model(batch.x_dict, batch.edge_index_dict)["paper"][: batch["paper"].batch_size]
        loss = F.cross_entropy(out, batch["paper"].y[: batch["paper"].batch_size])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert len(losses) == len(loader) and all(np.isfinite(losses))
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(bool(torch.isfinite(g).all()) for g in grads)
    assert any(bool(g.abs().sum() > 0) for g in grads)


def tag(batch):
    batch.tag = 1
    return batch


def test_repr_and_transform():
    data = make_hetero()
    loader = CompressedNeighborLoader(data, [2], input_nodes="paper", batch_size=300, device="cpu",
                                      transform=tag)
    assert repr(loader) == str(loader) == "CompressedNeighborLoader()"  # PyG's form: the class called
    assert "CompressedNeighborLoader(input_type='paper'" in loader.describe()
    assert "'int64[*]': 'ibp'" in loader.describe()
    assert next(iter(loader)).tag == 1


@pytest.mark.filterwarnings("ignore:Cannot convert to bidirectional graph")  # aff, empty: PyG warns too
def test_bidirectional_subgraph_is_pygs_conversion_of_the_directional_one():
    from torch_geometric.sampler import HeteroSamplerOutput as PyGOut

    data = make_hetero()
    kw = dict(num_neighbors=[3, 2], input_nodes="paper", batch_size=300)
    directional = batches(data, **kw)
    bidirectional = batches(data, subgraph_type="bidirectional", num_workers=2, **kw)
    for d, b in zip(directional, bidirectional):
        want = PyGOut(node={t: d[t].n_id for t in d.node_types},
                      row={e: d[e].edge_index[0] for e in d.edge_types},
                      col={e: d[e].edge_index[1] for e in d.edge_types},
                      edge={e: d[e].e_id for e in d.edge_types}).to_bidirectional()
        for t in data.node_types:
            assert torch.equal(b[t].n_id, d[t].n_id) and "num_sampled_nodes" not in b[t]
        for e in data.edge_types:
            assert torch.equal(b[e].edge_index, torch.stack([want.row[e], want.col[e]]))
            assert "num_sampled_edges" not in b[e]
            if want.edge[e] is None:  # merged with its reverse: no ids, no edge attributes
                assert "e_id" not in b[e] and "weight" not in b[e]
            else:
                assert torch.equal(b[e].e_id, want.edge[e])
        # writes and rev_writes merged: one is the other reversed, and every edge is real
        assert torch.equal(b[REV].edge_index, b[WRITES].edge_index.flip(0))
        real = set(map(tuple, data[WRITES].edge_index.t().tolist()))
        pairs = torch.stack([b["author"].n_id[b[WRITES].edge_index[0]], b["paper"].n_id[b[WRITES].edge_index[1]]])
        assert set(map(tuple, pairs.t().tolist())) <= real
        assert b[WRITES].edge_index.shape[1] >= d[WRITES].edge_index.shape[1]


def test_induced_subgraph_holds_every_edge_between_sampled_nodes():
    data = make_hetero()
    kw = dict(num_neighbors=[2, 2], input_nodes="paper", batch_size=300)
    directional = batches(data, **kw)
    with pytest.warns(DeprecationWarning, match="directed=False is deprecated"):
        loader = CompressedNeighborLoader(data, directed=False, device="cpu", **kw)
    torch.manual_seed(0)
    induced = list(loader)
    for d, b in zip(directional, induced):
        for t in data.node_types:
            assert torch.equal(b[t].n_id, d[t].n_id) and "num_sampled_nodes" not in b[t]
        for e in data.edge_types:
            src, _, dst = e
            ei = data[e].edge_index
            inside = torch.isin(ei[0], b[src].n_id) & torch.isin(ei[1], b[dst].n_id)
            assert torch.equal(b[e].e_id.sort().values, inside.nonzero().view(-1))  # all of them, once
            real = torch.stack([b[src].n_id[b[e].edge_index[0]], b[dst].n_id[b[e].edge_index[1]]])
            assert torch.equal(real, ei[:, b[e].e_id])
            for key in data[e].edge_attrs():
                if key != "edge_index":
                    assert torch.equal(b[e][key], data[e][key][b[e].e_id])


def test_pre_encoded_node_features_give_the_same_batches():
    from ibp_graph.data.store import EncodedTable

    data = make_hetero()
    kw = dict(num_neighbors=[3, 2], input_nodes="paper", batch_size=300, shuffle=True)
    plain = batches(data, **kw)
    table = EncodedTable.encode(data["paper"].x, codec="ebp")
    data["paper"].x = table
    data["paper"].num_nodes = 900
    torch.manual_seed(0)
    loader = CompressedNeighborLoader(data, device="cpu", num_workers=1, **kw)
    stored = list(loader)
    assert len(stored) == len(plain)
    for a, b in zip(plain, stored):
        assert torch.equal(a["paper"].x, b["paper"].x) and torch.equal(a["author"].x, b["author"].x)
        for e in data.edge_types:
            assert torch.equal(a[e].edge_index, b[e].edge_index)
    assert loader.codecs["paper.x@store"] is table.codec and "paper.x@store" in loader.stats.sent_bytes


def test_disjoint_batches_hold_one_subgraph_per_seed():
    data = make_hetero()
    kw = dict(num_neighbors=[3, 2], input_nodes=("paper", torch.arange(0, 900, 7)), batch_size=40)
    ref = batches(data, disjoint=True, codec="identity", **kw)
    same(ref, batches(data, disjoint=True, codec="auto", num_workers=2, **kw))
    for batch in ref:
        n = batch["paper"].batch_size
        assert torch.equal(batch["paper"].batch[:n], torch.arange(n))
        for t in data.node_types:
            assert batch[t].batch.shape == batch[t].n_id.shape
            assert sum(batch[t].num_sampled_nodes) == batch[t].n_id.numel()
            if "x" in data[t]:
                assert torch.equal(batch[t].x, data[t].x[batch[t].n_id])
        for e in data.edge_types:
            src, _, dst = e
            row, col = batch[e].edge_index
            assert torch.equal(batch[src].batch[row], batch[dst].batch[col])  # inside one subgraph
            assert torch.equal(data[e].edge_index[:, batch[e].e_id],
                               torch.stack([batch[src].n_id[row], batch[dst].n_id[col]]))


def test_temporal_batches_keep_neighbours_no_later_than_their_seed():
    data = make_hetero()
    g = torch.Generator().manual_seed(1)
    data["paper"].time = torch.randint(0, 50, (900,), generator=g)
    data["author"].time = torch.randint(0, 50, (1200,), generator=g)
    kw = dict(num_neighbors=[4, 3], input_nodes="paper", batch_size=100, time_attr="time")
    ref = batches(data, codec="identity", **kw)
    same(ref, batches(data, codec="auto", num_workers=2, **kw))
    for batch in ref:
        n = batch["paper"].batch_size
        seed_time = batch["paper"].time[:n]
        for t in ("paper", "author"):
            assert torch.equal(batch[t].time, data[t].time[batch[t].n_id])
            assert bool((batch[t].time <= seed_time[batch[t].batch]).all())  # nothing from the future
        for e in data.edge_types:
            src, _, dst = e
            row, col = batch[e].edge_index
            assert torch.equal(batch[src].batch[row], batch[dst].batch[col])
            assert torch.equal(data[e].edge_index[:, batch[e].e_id],
                               torch.stack([batch[src].n_id[row], batch[dst].n_id[col]]))
        assert "seed_time" not in batch["paper"]
    # given seed times, and the "last" strategy: the latest neighbours of each
    times = torch.full((900,), 25)
    last = batches(data, input_time=times, temporal_strategy="last", **kw)
    for batch in last:
        assert torch.equal(batch["paper"].seed_time, torch.full((batch["paper"].batch_size,), 25))
        assert bool((batch["author"].time <= 25).all()) and bool((batch["paper"].time[100:] <= 25).all())
    # edge-level times
    data["paper"].time = data["author"].time = None
    data[CITES].time = torch.randint(0, 50, (5000,), generator=g)
    data[WRITES].time = torch.randint(0, 50, (3000,), generator=g)
    for batch in batches(data, input_time=times, **kw):
        for e in (CITES, WRITES):
            assert bool((batch[e].time <= 25).all()) and torch.equal(batch[e].time, data[e].time[batch[e].e_id])
