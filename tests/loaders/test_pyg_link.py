"""CompressedLinkNeighborLoader: PyG's LinkNeighborLoader semantics field by field (what PyG's own
test/loader/test_link_neighbor_loader.py checks: homogeneous, heterogeneous, temporal, binary and triplet
negatives with amounts, neg_sampling_ratio, disjoint, edge labels, weights, input_id), local ids that map back
to the seed edges, the same batches for any number of workers and for any codec, bit-exact features, and
errors naming the argument."""
from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import LinkNeighborLoader
from torch_geometric.sampler import NegativeSampling

from ibp_graph.loaders.pyg import CompressedLinkNeighborLoader
from tests.loaders.test_pyg_inputs import graph_store

pytestmark = pytest.mark.filterwarnings("ignore:Using 'NeighborSampler' without a 'pyg-lib'")

BATCH = 20
BUYS = ("user", "buys", "item")
CITES = ("paper", "cites", "paper")


def make_data(num_nodes=300, num_edges=1500, seed=0) -> Data:
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, num_nodes, (2, num_edges), generator=g)
    x = torch.arange(num_nodes, dtype=torch.float32).view(-1, 1).repeat(1, 4)  # each row names its node
    return Data(x=x, edge_index=ei, edge_attr=torch.arange(num_edges, dtype=torch.float32),
                time=torch.randint(0, 100, (num_nodes,), generator=g), w=torch.rand(num_edges, generator=g))


def make_hetero(users=200, items=150, papers=120, seed=1) -> HeteroData:
    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    for t, n in (("user", users), ("item", items), ("paper", papers)):
        data[t].x = torch.arange(n, dtype=torch.float32).view(-1, 1).repeat(1, 3)
        data[t].time = torch.randint(0, 100, (n,), generator=g)
    data[BUYS].edge_index = torch.stack([torch.randint(0, users, (800,), generator=g),
                                         torch.randint(0, items, (800,), generator=g)])
    data["item", "rev_buys", "user"].edge_index = data[BUYS].edge_index.flip(0)
    data[CITES].edge_index = torch.randint(0, papers, (2, 600), generator=g)
    data["user", "reads", "paper"].edge_index = torch.stack([torch.randint(0, users, (500,), generator=g),
                                                             torch.randint(0, papers, (500,), generator=g)])
    data["paper", "rev_reads", "user"].edge_index = data["user", "reads", "paper"].edge_index.flip(0)
    return data


def link_loader(data, **kw):
    kw.setdefault("num_neighbors", [3, 2])
    kw.setdefault("batch_size", BATCH)
    kw.setdefault("device", "cpu")
    return CompressedLinkNeighborLoader(data, **kw)


def check_subgraph(batch, x):
    """The plumbing of the sampled subgraph: rows name their nodes, counts add up."""
    assert torch.equal(batch.x[:, 0].long(), batch.n_id) and torch.equal(batch.x, x[batch.n_id])
    assert sum(batch.num_sampled_nodes) == batch.n_id.numel()
    assert sum(batch.num_sampled_edges) == batch.edge_index.size(1) == batch.e_id.numel()
    assert "batch_size" not in batch  # LinkLoader's batches have none


# -- homogeneous ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("disjoint", [False, True])
@pytest.mark.parametrize("neg", [None, "binary", ("binary", 2), ("binary", 0.5)])
def test_binary_batches_hold_pygs_fields_and_local_ids_map_back(neg, disjoint):
    data = make_data()
    mode, amount = (neg, 1) if not isinstance(neg, tuple) else neg
    loader = link_loader(data, neg_sampling=None if neg is None else NegativeSampling(mode, amount),
                         disjoint=disjoint, shuffle=True)
    assert isinstance(loader, LinkNeighborLoader) and repr(loader) == "CompressedLinkNeighborLoader()"
    seen = []
    for batch in loader:
        check_subgraph(batch, data.x)
        pos = batch.input_id.numel()
        num_neg = 0 if neg is None else math.ceil(pos * amount)
        seen.append(batch.input_id)
        assert batch.edge_label_index.shape == (2, pos + num_neg)
        # positives: local ids -> the seed edges (input_id: their positions in edge_label_index)
        assert torch.equal(batch.n_id[batch.edge_label_index[:, :pos]], data.edge_index[:, batch.input_id])
        assert int(batch.edge_label_index.max()) < batch.n_id.numel()
        if neg is None:
            assert "edge_label" not in batch
        else:  # PyG: float ones for the positives, zeros for the negatives appended
            assert batch.edge_label.dtype == torch.float32
            assert torch.equal(batch.edge_label, torch.cat([torch.ones(pos), torch.zeros(num_neg)]))
        if disjoint:  # each subgraph belongs to example batch % num_pos; every endpoint is its own seed
            assert int(batch.batch.max()) < pos
            width = pos + num_neg
            assert torch.equal(batch.edge_label_index, torch.arange(2 * width).view(2, -1))
            seeds = batch.batch[:2 * width]
            assert torch.equal(seeds, torch.arange(2 * width) % pos)
        else:
            assert "batch" not in batch
            assert torch.equal(batch.n_id[:batch.num_sampled_nodes[0]].unique(), batch.n_id[:batch.num_sampled_nodes[0]])
    assert torch.equal(torch.cat(seen).sort().values, torch.arange(data.edge_index.size(1)))


@pytest.mark.parametrize("disjoint", [False, True])
@pytest.mark.parametrize("amount", [1, 3])
def test_triplet_batches_hold_src_dst_pos_and_dst_neg_indices(amount, disjoint):
    data = make_data()
    for batch in link_loader(data, neg_sampling=NegativeSampling("triplet", amount), disjoint=disjoint):
        check_subgraph(batch, data.x)
        pos = batch.input_id.numel()
        assert "edge_label_index" not in batch and "edge_label" not in batch
        assert torch.equal(batch.n_id[batch.src_index], data.edge_index[0, batch.input_id])
        assert torch.equal(batch.n_id[batch.dst_pos_index], data.edge_index[1, batch.input_id])
        assert batch.dst_neg_index.shape == ((pos,) if amount == 1 else (pos, amount))
        assert 0 <= int(batch.dst_neg_index.min()) and int(batch.dst_neg_index.max()) < batch.n_id.numel()
        if disjoint:  # PyG's offsets: negative k of positive j sits in subgraph j
            assert torch.equal(batch.batch[batch.dst_neg_index].view(pos, -1), torch.arange(pos).view(-1, 1)
                               .expand(pos, amount))


def test_neg_sampling_ratio_is_binary_sampling_of_that_amount_and_string_modes_work():
    data = make_data()
    torch.manual_seed(0)
    a = next(iter(link_loader(data, neg_sampling_ratio=2.0)))
    torch.manual_seed(0)
    b = next(iter(link_loader(data, neg_sampling=NegativeSampling("binary", 2.0))))
    assert a.edge_label_index.size(1) == 3 * BATCH and torch.equal(a.edge_label_index, b.edge_label_index)
    c = next(iter(link_loader(data, neg_sampling="triplet")))
    assert c.dst_neg_index.shape == (BATCH,)
    assert link_loader(data, neg_sampling="binary").neg_sampling.is_binary()  # PyG's record, for PyG's helpers


def test_user_edge_labels_are_shifted_by_one_with_binary_negatives_as_pyg():
    data = make_data()
    edge_label_index = data.edge_index[:, :100]
    label = torch.arange(100) % 3  # classes 0..2: PyG shifts them to 1..3, 0 marks negatives
    for neg in (None, "binary"):
        for batch in link_loader(data, edge_label_index=edge_label_index, edge_label=label, neg_sampling=neg):
            pos = batch.input_id.numel()
            want = label[batch.input_id] + (neg is not None)
            assert torch.equal(batch.edge_label[:pos], want) and batch.edge_label.dtype == torch.int64
            if neg is not None:
                assert torch.equal(batch.edge_label[pos:], torch.zeros(pos, dtype=torch.int64))
            assert torch.equal(batch.n_id[batch.edge_label_index[:, :pos]], edge_label_index[:, batch.input_id])


def test_given_input_id_is_reported_for_the_batch_edges():
    data = make_data()
    ids = torch.arange(data.edge_index.size(1)) * 7
    for batch in link_loader(data, input_id=ids, shuffle=True):
        assert torch.equal(batch.n_id[batch.edge_label_index], data.edge_index[:, batch.input_id // 7])


def test_node_level_temporal_sampling_honours_edge_label_time():
    data = make_data()
    edge_label_time = torch.randint(0, 100, (data.edge_index.size(1),), generator=torch.Generator().manual_seed(3))
    loader = link_loader(data, edge_label_time=edge_label_time, time_attr="time", neg_sampling="binary")
    for batch in loader:
        pos = batch.input_id.numel()
        seed_time = edge_label_time[batch.input_id]
        assert torch.equal(batch.edge_label_time, seed_time.repeat(2))
        # temporal sampling is disjoint; a subgraph holds no node later than its example's time (seeds aside)
        sampled = batch.n_id[batch.num_sampled_nodes[0]:]
        assert (data.time[sampled] <= seed_time[batch.batch[batch.num_sampled_nodes[0]:]]).all()
        # negatives exist at their positive's time (or are the earliest node, PyG's fallback)
        neg = batch.n_id[batch.edge_label_index[:, pos:]]
        assert (data.time[neg] <= seed_time).all()


def test_edge_weights_and_negative_weights_are_honoured():
    data = make_data()
    data.w[::2] = 0.0  # even edges are never drawn
    dst_weight = torch.zeros(data.num_nodes)
    dst_weight[:10] = 1.0  # negative destinations come from nodes 0..9
    neg = NegativeSampling("binary", 1, dst_weight=dst_weight)
    # with replacement a zero-weight edge is never drawn (without, a fan-out >= the in-degree takes all, as PyG)
    for batch in link_loader(data, weight_attr="w", neg_sampling=neg, num_neighbors=[2], replace=True):
        pos = batch.input_id.numel()
        assert (batch.e_id % 2 == 1).all()
        assert (batch.n_id[batch.edge_label_index[1, pos:]] < 10).all()


def test_homogeneous_stores_give_the_batches_of_the_data():
    from torch_geometric.testing import MyFeatureStore

    data = make_data()
    fs = MyFeatureStore()
    fs.put_tensor(data.x, group_name=None, attr_name="x", index=None)
    gs = graph_store({None: data.edge_index}, "coo", {None: (300, 300)})
    kw = dict(edge_label_index=data.edge_index[:, :200], neg_sampling="binary")
    torch.manual_seed(0)
    want = list(link_loader(Data(x=data.x, edge_index=data.edge_index), **kw))
    torch.manual_seed(0)
    got = list(link_loader((fs, gs), **kw))
    assert len(want) == len(got) == 10
    for a, b in zip(want, got):
        for key in ("x", "n_id", "e_id", "edge_index", "edge_label_index", "edge_label", "input_id"):
            assert torch.equal(a[key], b[key]), key


# -- heterogeneous -------------------------------------------------------------------------------------------

def check_hetero(batch, data):
    for t in data.node_types:
        assert torch.equal(batch[t].x[:, 0].long(), batch[t].n_id)
        assert sum(batch[t].num_sampled_nodes) == batch[t].n_id.numel()
    for e in data.edge_types:
        src, _, dst = e
        ei = batch[e].edge_index
        assert torch.equal(data[e].edge_index[:, batch[e].e_id],
                           torch.stack([batch[src].n_id[ei[0]], batch[dst].n_id[ei[1]]]))


@pytest.mark.parametrize("edge_type", [BUYS, CITES])
@pytest.mark.parametrize("disjoint", [False, True])
@pytest.mark.parametrize("neg", [None, "binary", "triplet"])
def test_heterogeneous_batches_put_pygs_fields_on_the_edge_and_node_types(edge_type, disjoint, neg):
    data = make_hetero()
    src_t, _, dst_t = edge_type
    loader = link_loader(data, edge_label_index=(edge_type, data[edge_type].edge_index[:, :100]),
                         neg_sampling=neg, disjoint=disjoint, shuffle=True)
    n = 0
    for batch in loader:
        check_hetero(batch, data)
        store = batch[edge_type]
        pos = store.input_id.numel()
        n += pos
        seeds = data[edge_type].edge_index[:, store.input_id]
        if neg == "triplet":
            assert torch.equal(batch[src_t].n_id[batch[src_t].src_index], seeds[0])
            assert torch.equal(batch[dst_t].n_id[batch[dst_t].dst_pos_index], seeds[1])
            assert int(batch[dst_t].dst_neg_index.max()) < batch[dst_t].n_id.numel()
            assert "edge_label_index" not in store
            continue
        width = pos if neg is None else 2 * pos
        assert store.edge_label_index.shape == (2, width)
        got = torch.stack([batch[src_t].n_id[store.edge_label_index[0]], batch[dst_t].n_id[store.edge_label_index[1]]])
        assert torch.equal(got[:, :pos], seeds)
        if neg == "binary":
            assert torch.equal(store.edge_label, torch.cat([torch.ones(pos), torch.zeros(pos)]))
        if disjoint:  # pyg-lib numbers the seeds across the seed types; PyG takes them modulo num_pos
            for t in data.node_types:
                assert (batch[t].batch < pos).all()
            if src_t != dst_t:
                assert torch.equal(batch[src_t].batch[:width], torch.arange(width) % pos)
                assert torch.equal(batch[dst_t].batch[:width], (width + torch.arange(width)) % pos)
    assert n == 100


def test_heterogeneous_edge_type_forms_and_temporal_sampling():
    data = make_hetero()
    all_edges = link_loader(data, edge_label_index=BUYS, batch_size=1000)
    assert next(iter(all_edges))[BUYS].edge_label_index.size(1) == 800
    short = link_loader(data, edge_label_index=(("user", "item"), None), batch_size=1000)
    assert short.input_type == BUYS
    time = torch.randint(0, 100, (800,), generator=torch.Generator().manual_seed(4))
    for batch in link_loader(data, edge_label_index=BUYS, edge_label_time=time, time_attr="time",
                             neg_sampling="binary"):
        store = batch[BUYS]
        seed_time = time[store.input_id]
        assert torch.equal(store.edge_label_time, seed_time.repeat(2))
        for t in data.node_types:
            first = batch[t].num_sampled_nodes[0]
            assert (data[t].time[batch[t].n_id[first:]] <= seed_time[batch[t].batch[first:]]).all()


# -- reproducibility, codecs, features -----------------------------------------------------------------------

def _digest(loader):
    torch.manual_seed(5)
    out = []
    for batch in loader:
        for store in batch.stores:
            out += [(k, v.clone() if isinstance(v, torch.Tensor) else v) for k, v in sorted(store.items())]
    return out


@pytest.mark.parametrize("hetero", [False, True])
def test_same_seed_same_batches_for_any_workers_and_codec(hetero):
    data = make_hetero() if hetero else make_data()
    kw = dict(edge_label_index=(BUYS, None) if hetero else None, neg_sampling="binary", shuffle=True)
    base = _digest(link_loader(data, **kw))
    for other in (dict(num_workers=2), dict(codec="identity"), dict(num_workers=2, disjoint=False)):
        got = _digest(link_loader(data, **kw, **other))
        assert len(got) == len(base)
        for (k, a), (k2, b) in zip(base, got):
            assert k == k2 and (torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b), k


def test_special_float_features_arrive_bit_exact():
    data = make_data()
    x = torch.randn(300, 4)
    x[::7, 0] = -0.0
    x[::11, 1] = float("nan")
    x[::13, 2] = 1e-42  # subnormal
    x[::17, 3] = float("-inf")
    data.x = x
    for codec in ("auto", "ibp", "ebp"):
        for batch in link_loader(data, neg_sampling="binary", codec=codec):
            assert torch.equal(batch.x.view(torch.int32), x[batch.n_id].view(torch.int32))


# -- errors --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, error, match", [
    (dict(edge_label_index=torch.zeros(3, 5, dtype=torch.long)), ValueError, r"edge_label_index has shape \(3, 5\)"),
    (dict(edge_label_index=torch.zeros(2, 5)), TypeError, "edge_label_index has dtype torch.float32"),
    (dict(edge_label_index=torch.tensor([[0, 300], [1, 2]])), IndexError, r"source node 300, outside \[0, 300\)"),
    (dict(neg_sampling="foo"), ValueError, "mode='foo' is not accepted"),
    (dict(neg_sampling=NegativeSampling("triplet", 1), edge_label=torch.ones(1500)), ValueError,
     "edge_label is given with 'triplet'"),
    (dict(edge_label=torch.ones(7)), ValueError, r"edge_label has shape \(7,\)"),
    (dict(edge_label_time=torch.zeros(1500)), ValueError, "edge_label_time is set but time_attr is None"),
    (dict(time_attr="time"), ValueError, "edge_label_time is None but time_attr is 'time'"),
    (dict(edge_label_time=torch.zeros(3), time_attr="time"), ValueError, r"edge_label_time has shape \(3,\)"),
    (dict(neighbor_sampler=object()), NotImplementedError, "CompressedLinkNeighborLoader does not support"),
])
def test_errors_name_the_argument_and_value(kw, error, match):
    with pytest.raises(error, match=match):
        link_loader(make_data(), **kw)


def test_heterogeneous_errors_name_the_edge_type():
    data = make_hetero()
    with pytest.raises(ValueError, match=r"edge type \('user', 'likes', 'item'\), which the graph does not have"):
        link_loader(data, edge_label_index=("user", "likes", "item"))
    with pytest.raises(ValueError, match="is not accepted for a heterogeneous graph"):
        link_loader(data, edge_label_index=torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(IndexError, match=r"destination node 150, outside \[0, 150\)"):
        link_loader(data, edge_label_index=(BUYS, torch.tensor([[0], [150]])))


def test_a_link_batch_sends_its_features_as_a_node_batch_of_the_same_nodes_does():
    """Issue 21: the features of both endpoints and of the negatives travel as node batches' do, one group per
    dtype and row shape with its codec, so a link batch costs what a node batch of the same sampled nodes
    costs: the group's bytes are the codec's encoding of exactly the rows x[n_id], in either loader."""
    from ibp_graph.codec.auto import fit_codec
    from ibp_graph.loaders.pyg import CompressedNeighborLoader

    g = torch.Generator().manual_seed(5)
    data = make_data()
    data.x = torch.randn(data.num_nodes, 16, generator=g).half().float()  # compressible rows
    codec = fit_codec(data.x, "ibp")
    group = "float32[16]"
    edges = data.edge_index[:, :BATCH]
    link = link_loader(data, edge_label_index=edges, neg_sampling="binary", codec=codec)
    (lbatch,) = list(link)
    node = CompressedNeighborLoader(data, [3, 2], input_nodes=lbatch.n_id[:2 * BATCH], batch_size=2 * BATCH,
                                    device="cpu", codec=codec)
    (nbatch,) = list(node)
    for loader, batch in ((link, lbatch), (node, nbatch)):
        assert torch.equal(batch.x, data.x[batch.n_id])
        assert loader.stats.sent_bytes[group] == codec.encode(data.x[batch.n_id]).nbytes < loader.stats.raw_bytes[group]
        assert loader.stats.raw_bytes[group] == batch.n_id.numel() * 16 * 4
