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
from ibp_graph.pipeline.requests import BatchRequest
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


@pytest.mark.parametrize("hetero", [False, True])
@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.float64, torch.bool])
def test_given_input_id_keeps_its_dtype_as_pyg(dtype, hetero):
    """PyG only indexes input_id: a batch's is input_id[positions], in the dtype it was given."""
    data = make_hetero() if hetero else make_data()
    num = (data[BUYS] if hetero else data).edge_index.size(1)
    ids = (torch.arange(num) % 5 == 0) if dtype == torch.bool else (torch.arange(num) * 3).to(dtype)
    kw = dict(edge_label_index=BUYS) if hetero else {}
    ref = seeded(link_loader(data, neg_sampling="binary", **kw))
    got = seeded(link_loader(data, neg_sampling="binary", input_id=ids, **kw))
    for a, b in zip(got, ref):
        a, b = (a[BUYS], b[BUYS]) if hetero else (a, b)
        assert a.input_id.dtype == dtype and torch.equal(a.input_id, ids[b.input_id])
        assert torch.equal(a.edge_label_index, b.edge_label_index)


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


@pytest.mark.parametrize("stores", [False, True])
def test_homogeneous_edge_label_index_in_pygs_remote_form_none_and_ids(stores):
    """PyG's LinkLoader takes a (FeatureStore, GraphStore) pair's seed edges only as (edge type, None | ids), the
    edge type None for a homogeneous graph (as its DistLinkNeighborLoader test passes them): the batches of
    (None, ids) are those of ids, and (None, None) seeds every edge, as None does."""
    from torch_geometric.testing import MyFeatureStore

    data = make_data()
    if stores:
        fs = MyFeatureStore()
        fs.put_tensor(data.x, group_name=None, attr_name="x", index=None)
        graph = (fs, graph_store({None: data.edge_index}, "coo", {None: (300, 300)}))
    else:
        graph = Data(x=data.x, edge_index=data.edge_index)
    ids = data.edge_index[:, 100:160]
    want = seeded(link_loader(graph, edge_label_index=ids, neg_sampling="binary"))
    for form in ((None, ids), [None, ids]):
        got = seeded(link_loader(graph, edge_label_index=form, neg_sampling="binary"))
        assert len(got) == len(want) == 3
        for a, b in zip(got, want):
            for key in ("n_id", "e_id", "edge_index", "edge_label_index", "edge_label", "input_id"):
                assert torch.equal(a[key], b[key]), key
    every = link_loader(graph, edge_label_index=(None, None), batch_size=1500)
    assert every.input_type is None
    assert torch.equal(torch.stack([every.input_data.row, every.input_data.col]), data.edge_index)


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


def test_an_edge_type_may_be_named_by_its_relation_alone_as_pyg():
    """PyG canonicalizes the edge type of edge_label_index (HeteroData._to_canonical): a relation that names one
    edge type, (rel,), is that edge type, alone or with ids."""
    data = make_hetero()
    ids = data[BUYS].edge_index[:, :30]
    for form in (("buys",), ["buys"], (("buys",), ids), (("buys",), None)):
        loader = link_loader(data, edge_label_index=form, batch_size=1000)
        assert loader.input_type == BUYS
        want = data[BUYS].edge_index if form[-1] is None or isinstance(form[-1], str) else ids
        assert torch.equal(torch.stack([loader.input_data.row, loader.input_data.col]), want)
    with pytest.raises(ValueError, match=r"edge type \('writes',\), which the graph does not have"):
        link_loader(data, edge_label_index=("writes",))

@pytest.mark.parametrize("neg", [None, "binary", "triplet"])
@pytest.mark.parametrize("form, want", [((("user", "item"), "ids"), ("user", "to", "item")),
                                        ((("user", "likes", "item"), "ids"), ("user", "likes", "item")),
                                        ((("item", "item"), "ids"), ("item", "to", "item"))])
def test_supervision_edges_of_a_type_the_graph_lacks_are_seeds_as_pyg(form, want, neg):
    """PyG's get_edge_label_index takes ``(edge type, ids)`` of an edge type the graph has no edges of (e.g. links
    to predict that message passing does not see; PyG's test_hetero_link_neighbor_loader_no_edges): its
    _to_canonical makes ``(src, dst)`` ``(src, 'to', dst)`` and keeps a triple; the batch's link fields sit on
    that edge type's store, its endpoints' rows on their node types."""
    data = make_hetero()
    del data[BUYS], data["item", "rev_buys", "user"]  # users and items are linked by no edge of the graph
    src_t, _, dst_t = want
    g = torch.Generator().manual_seed(7)
    ids = torch.stack([torch.randint(0, data[src_t].num_nodes, (50,), generator=g),
                       torch.randint(0, data[dst_t].num_nodes, (50,), generator=g)])
    loader = link_loader(data, edge_label_index=(form[0], ids), neg_sampling=neg)
    assert loader.input_type == want
    seen = []
    for batch in loader:
        store = batch[want]
        pos = store.input_id.numel()
        seen.append(store.input_id)
        if neg == "triplet":
            assert torch.equal(batch[src_t].n_id[batch[src_t].src_index], ids[0, store.input_id])
            assert torch.equal(batch[dst_t].n_id[batch[dst_t].dst_pos_index], ids[1, store.input_id])
        else:
            got = torch.stack([batch[src_t].n_id[store.edge_label_index[0]],
                               batch[dst_t].n_id[store.edge_label_index[1]]])
            assert torch.equal(got[:, :pos], ids[:, store.input_id])
        for t in (src_t, dst_t):
            assert torch.equal(batch[t].x, data[t].x[batch[t].n_id])
    assert torch.equal(torch.cat(seen).sort().values, torch.arange(50))
    with pytest.raises(ValueError, match=r"edge type \('user', 'likes', 'item'\), which the graph does not have"):
        link_loader(data, edge_label_index=(("user", "likes", "item"), None))  # no ids: PyG reads the type's edges
    with pytest.raises(ValueError, match=r"edge type \('author', 'writes', 'paper'\), but the graph has no "
                                         r"node type 'author'"):
        link_loader(data, edge_label_index=(("author", "writes", "paper"), ids))



def test_neg_sampling_may_be_pygs_mode_enum_as_pygs_cast_takes_it():
    from torch_geometric.sampler.base import NegativeSamplingMode

    loader = link_loader(make_data(), neg_sampling=NegativeSamplingMode.triplet)
    assert loader.neg_sampling.is_triplet() and loader.neg_sampling.amount == 1
    batch = next(iter(loader))
    assert batch.src_index.shape == batch.dst_pos_index.shape == batch.dst_neg_index.shape == (BATCH,)


def test_temporal_induced_sampling_is_refused_naming_the_times_not_disjoint():
    data = make_data()
    with pytest.raises(ValueError, match=r"^temporal sampling \(node-level times, a loader's time_attr; it is "
                                         r"disjoint\) with subgraph_type='induced' is not accepted"):
        link_loader(data, edge_label_time=torch.zeros(1500), time_attr="time", subgraph_type="induced")


class _SameSample:
    """A PyG link sampler that runs PyG's own edge_sample on the sample our loader draws for one BatchRequest (its
    sampler output, its negatives), so that PyG's LinkLoader (label shift, input_id, edge_sample's layout, filter_fn)
    finishes the same sample into its batch."""

    edge_permutation = None

    def __init__(self, ours, node_time, num_nodes):
        self.ours, self.node_time, self.num_nodes, self.req = ours, node_time, num_nodes, None

    def sample_from_edges(self, inputs, neg_sampling=None):
        import torch_geometric.sampler.neighbor_sampler as pyg_sampler
        from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput

        planner = self.ours._producer.planner
        link, out, _ = planner.draw(self.req)

        def sample_fn(seed, seed_time):
            if not isinstance(seed, dict):
                one = {k: None if v is None else v[None] for k, v in vars(out).items()}
                assert torch.equal(seed, one["node"][:seed.numel()])
                return SamplerOutput(**one)
            for t, nodes in seed.items():
                assert torch.equal(nodes, out.node[t][:nodes.numel()])
            return HeteroSamplerOutput(**vars(out))

        drawn = {"src": link.src_neg, "dst": link.dst_neg}
        with pytest.MonkeyPatch.context() as mp:  # PyG's neg_sample draws ours
            mp.setattr(pyg_sampler, "neg_sample", lambda seed, neg, n, st, nt, endpoint: drawn[endpoint])
            return pyg_sampler.edge_sample(inputs, sample_fn, self.num_nodes, bool(planner.sampler.disjoint),
                                           self.node_time, neg_sampling)


def _same_batch(ours, pyg):
    stores = {s._key: s for s in ours.stores}
    assert stores.keys() == {s._key for s in pyg.stores}
    for want in pyg.stores:
        got = stores[want._key]
        assert set(got.keys()) == set(want.keys()), want._key
        for key, value in want.items():
            if isinstance(value, torch.Tensor):
                assert got[key].dtype == value.dtype and torch.equal(got[key], value), (want._key, key)
            else:
                assert got[key] == value, (want._key, key)


@pytest.mark.parametrize("hetero", [False, True])
@pytest.mark.parametrize("neg, label, temporal, disjoint", [
    (None, None, False, False), (None, "from 0", False, True), ("binary", None, False, False),
    (("binary", 0.4), "from 0", False, True), (dict(mode="binary", amount=2.5), "from 1", True, True),
    ("triplet", None, False, True), (NegativeSampling("triplet", 2), None, True, False),
    (("binary", 1.5), "rows", False, False)])
def test_batches_equal_what_pygs_link_loader_makes_of_the_same_sample(hetero, neg, label, temporal, disjoint):
    """Field by field (names, dtypes, values, on which store): our batch and the one PyG's LinkNeighborLoader
    makes (its collate_fn and filter_fn, PyG's edge_sample) of the same sampled subgraph and negatives, for a graph
    that stores supervision edges too (PyG replaces or removes them)."""
    data = make_hetero() if hetero else make_data()
    g = torch.Generator().manual_seed(3)
    n = 45
    ids = (data[BUYS] if hetero else data).edge_index[:, 200:200 + n]
    store = data[BUYS] if hetero else data  # supervision edges stored as RandomLinkSplit leaves them
    store.edge_label_index, store.edge_label = ids, torch.ones(n)
    labels = {None: None, "from 0": torch.randint(0, 3, (n,), generator=g),
              "from 1": torch.randint(1, 4, (n,), generator=g), "rows": torch.rand(n, 2, generator=g)}[label]
    kw = dict(num_neighbors=[2, 2], edge_label_index=(BUYS, ids) if hetero else ids, edge_label=labels,
              neg_sampling=neg, disjoint=disjoint, batch_size=BATCH, filter_per_worker=False)
    if temporal:
        kw.update(edge_label_time=torch.randint(0, 100, (n,), generator=g), time_attr="time")
    ours = CompressedLinkNeighborLoader(data, device="cpu", **kw)
    node_time = ({t: data[t].time for t in data.node_types} if hetero else data.time) if temporal else None
    sampler = _SameSample(ours, node_time, {t: data[t].num_nodes for t in data.node_types} if hetero else 300)
    pyg = LinkNeighborLoader(data, neighbor_sampler=sampler, **kw)
    for i, start in enumerate(range(0, n, BATCH)):
        index = torch.arange(start, min(n, start + BATCH))
        sampler.req = BatchRequest(index=index, seed=100 + i)
        _same_batch(ours.filter_fn(ours.collate_fn(sampler.req)), pyg.filter_fn(pyg.collate_fn(index)))


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
    # PyG's own words (its tests match them), then ours
    (dict(edge_label_time=torch.zeros(1500)), ValueError,
     "'edge_label_time' is set while 'time_attr' is not set \\(time_attr=None\\); accepted: both"),
    (dict(time_attr="time"), ValueError, "'edge_label_time' is not set while 'time_attr' is set \\(time_attr='time'\\)"),
    (dict(edge_label_time=torch.zeros(3), time_attr="time"), ValueError, r"edge_label_time has shape \(3,\)"),
    (dict(neighbor_sampler=object()), NotImplementedError, "CompressedLinkNeighborLoader does not support"),
    (dict(edge_label_index=CITES), ValueError, r"edge_label_index=\('paper', 'cites', 'paper'\) is an edge type, "
     r"which a homogeneous graph does not have; accepted: None .*, a \[2, E\] tensor"),
    (dict(neg_sampling_ratio="1"), TypeError, r"neg_sampling_ratio='1' is not accepted; use None, 0"),
    (dict(neg_sampling_ratio=-1), ValueError, r"neg_sampling_ratio=-1 is not accepted"),
    (dict(input_id=torch.arange(3000).view(1500, 2)), ValueError,
     r"input_id has shape \(1500, 2\); accepted: one id per seed edge, shape \(1500,\)"),
    (dict(edge_label_time=torch.rand(1500).index_fill_(0, torch.tensor([1400]), float("nan")), time_attr="time"),
     ValueError, "edge_label_time holds NaN"),  # at construction, not at the batch holding it
])
def test_errors_name_the_argument_and_value(kw, error, match):
    with pytest.raises(error, match=match):
        link_loader(make_data(), **kw)


def test_heterogeneous_errors_name_the_edge_type():
    data = make_hetero()
    with pytest.raises(ValueError, match=r"edge type \('user', 'likes', 'item'\), which the graph does not have"):
        link_loader(data, edge_label_index=("user", "likes", "item"))
    with pytest.raises(ValueError, match=r"edge_label_index=a Tensor of shape \(2, 3\) is not accepted for a "
                                         r"heterogeneous graph; use an edge type \(one of \[\('user', 'buys'"):
        link_loader(data, edge_label_index=torch.tensor([[11, 12, 13], [14, 15, 16]]))
    data["user", "likes", "item"].edge_index = data[BUYS].edge_index[:, :10]
    with pytest.raises(ValueError, match=r"edge type \('user', 'item'\), which matches several edge types "
                                         r"\(\[\('user', 'buys', 'item'\), \('user', 'likes', 'item'\)\]\); accepted"):
        link_loader(data, edge_label_index=("user", "item"))
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


# -- PyG's LinkNeighborLoader options on link batches (issue 21) ------------------------------------------

def same_batch(a, b, skip=()):
    assert sorted(a.keys()) == sorted(b.keys())
    for store_a, store_b in zip(a.stores, b.stores):
        for key, value in store_a.items():
            if key in skip:
                continue
            other = store_b[key]
            assert (torch.equal(value, other) if isinstance(value, torch.Tensor) else value == other), key


def seeded(loader, seed=5):
    torch.manual_seed(seed)
    return list(loader)


@pytest.mark.parametrize("disjoint", [False, True])
def test_transform_sampler_output_is_applied_to_pygs_sampler_output_after_the_modulo(disjoint):
    from torch_geometric.sampler import SamplerOutput

    data = make_data()
    seen = []

    def every_other_edge(out):  # drops edges; records the batch vector it sees
        assert isinstance(out, SamplerOutput)
        seen.append(None if out.batch is None else out.batch.clone())
        out.row, out.col, out.edge = out.row[::2], out.col[::2], out.edge[::2]
        return out

    kw = dict(neg_sampling="binary", disjoint=disjoint)
    ref = seeded(link_loader(data, **kw))
    got = seeded(link_loader(data, transform_sampler_output=every_other_edge, **kw))
    assert len(seen) == len(got) == len(ref)
    for a, b, batch_seen in zip(got, ref, seen):
        assert torch.equal(a.edge_index, b.edge_index[:, ::2]) and torch.equal(a.e_id, b.e_id[::2])
        assert torch.equal(a.edge_attr, data.edge_attr[a.e_id]) and torch.equal(a.w, data.w[a.e_id])
        same_batch(a, b, skip=("edge_index", "e_id", "edge_attr", "w"))
        if disjoint:  # PyG's batch % num_pos happens before the transform
            assert torch.equal(batch_seen, a.batch) and int(batch_seen.max()) < a.input_id.numel()
        else:
            assert batch_seen is None

    def reversed_nodes(out):  # a new `node`: the batch's n_id and rows follow it, as PyG's filter_data
        out.node = out.node.flip(0)
        return out

    for a, b in zip(seeded(link_loader(data, transform_sampler_output=reversed_nodes, **kw)), ref):
        assert torch.equal(a.n_id, b.n_id.flip(0)) and torch.equal(a.x, data.x[a.n_id])


def test_transform_sampler_output_on_a_heterogeneous_link_batch():
    from torch_geometric.sampler import HeteroSamplerOutput

    data = make_hetero()

    def drop_cites(out):
        assert isinstance(out, HeteroSamplerOutput)
        out.row[CITES], out.col[CITES], out.edge[CITES] = (v[:0] for v in (out.row[CITES], out.col[CITES],
                                                                           out.edge[CITES]))
        return out

    kw = dict(edge_label_index=(BUYS, None), neg_sampling="binary")
    ref = seeded(link_loader(data, **kw))
    got = seeded(link_loader(data, transform_sampler_output=drop_cites, **kw))
    assert len(got) == len(ref) == 40
    for a, b in zip(got, ref):
        assert a[CITES].edge_index.shape == (2, 0) and a[CITES].e_id.numel() == 0
        assert b[CITES].edge_index.size(1) > 0 or b["paper"].n_id.numel() == 0
        for e in data.edge_types:
            if e != CITES:
                assert torch.equal(a[e].edge_index, b[e].edge_index) and torch.equal(a[e].e_id, b[e].e_id)
        for key in ("edge_label_index", "edge_label", "input_id"):
            assert torch.equal(a[BUYS][key], b[BUYS][key])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_filter_per_worker_either_way_gives_the_same_link_batches(num_workers):
    data = make_data()
    kw = dict(neg_sampling="binary", shuffle=True, num_workers=num_workers)
    a = seeded(link_loader(data, filter_per_worker=True, **kw))
    b = seeded(link_loader(data, filter_per_worker=False, **kw))
    assert len(a) == len(b) == 75
    for x, y in zip(a, b):
        same_batch(x, y)


@pytest.mark.parametrize("filter_per_worker", [True, False])
def test_calling_the_link_loader_samples_those_seed_edges(filter_per_worker):
    from ibp_graph.pipeline.batch import EncodedBatch

    data = make_data()
    loader = link_loader(data, neg_sampling="binary", filter_per_worker=filter_per_worker)
    torch.manual_seed(5)
    batch = loader([3, 0, 7])
    assert isinstance(batch, Data) and batch.input_id.tolist() == [3, 0, 7]
    assert torch.equal(batch.n_id[batch.edge_label_index[:, :3]], data.edge_index[:, [3, 0, 7]])
    check_subgraph(batch, data.x)
    torch.manual_seed(5)
    out = loader.collate_fn(torch.tensor([3, 0, 7]))
    assert isinstance(out, Data if filter_per_worker else EncodedBatch)  # PyG's split of the work
    same_batch(out if filter_per_worker else loader.filter_fn(out), batch)


@pytest.mark.parametrize("filter_per_worker", [True, False])
def test_zip_loader_zips_link_batches(filter_per_worker):
    from torch_geometric.loader import ZipLoader

    data = make_data()
    first = link_loader(data, num_neighbors=[-1], neg_sampling="triplet")
    second = link_loader(data, num_neighbors=[-1], edge_label_index=data.edge_index[:, 500:])
    zipped = ZipLoader([first, second], batch_size=BATCH, filter_per_worker=filter_per_worker)
    assert len(zipped) == 50
    n = 0
    for a, b in zipped:
        assert torch.equal(a.n_id[a.src_index], data.edge_index[0, a.input_id])
        assert torch.equal(b.n_id[b.edge_label_index], data.edge_index[:, 500 + b.input_id])
        check_subgraph(a, data.x)
        check_subgraph(b, data.x)
        n += 1
    assert n == 50


def _bidirectional(out):
    return out.to_bidirectional(keep_orig_edges=False)


@pytest.mark.parametrize("disjoint", [False, True])
def test_bidirectional_link_batches_are_pygs_conversion_of_the_sampled_edges(disjoint):
    data = make_data()
    kw = dict(neg_sampling="binary", disjoint=disjoint)
    got = seeded(link_loader(data, subgraph_type="bidirectional", **kw))
    want = seeded(link_loader(data, transform_sampler_output=_bidirectional, **kw))  # PyG's conversion
    for a, b in zip(got, want):
        assert "num_sampled_nodes" not in a and "num_sampled_edges" not in a  # as PyG's
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_label_index, b.edge_label_index)
        assert torch.equal(a.edge_index, b.edge_index)  # coalesced, sorted by (destination, source)
        # a pair sampled both ways keeps 'any' of its ids (PyG's coalesce(reduce='any')): one of the pair's edges
        assert torch.equal(data.edge_index[:, a.e_id].sort(0).values, a.n_id[a.edge_index].sort(0).values)
        assert torch.equal(a.x, data.x[a.n_id]) and torch.equal(a.edge_attr, data.edge_attr[a.e_id])


def test_bidirectional_heterogeneous_link_batches_are_pygs_conversion():
    data = make_hetero()
    kw = dict(edge_label_index=(BUYS, None), neg_sampling="binary")
    got = seeded(link_loader(data, subgraph_type="bidirectional", **kw))
    want = seeded(link_loader(data, transform_sampler_output=_bidirectional, **kw))
    assert len(got) == len(want) == 40
    for a, b in zip(got, want):
        same_batch(a, b)
        assert torch.equal(a[BUYS].edge_label_index, b[BUYS].edge_label_index)


@pytest.mark.parametrize("how", ["subgraph_type", "directed"])
def test_induced_link_batches_hold_every_edge_among_the_sampled_nodes(how):
    import contextlib

    data = make_data()
    kwargs = {"subgraph_type": "induced"} if how == "subgraph_type" else {"directed": False}
    with pytest.warns(DeprecationWarning, match="directed=False") if how == "directed" else contextlib.nullcontext():
        loader = link_loader(data, neg_sampling="binary", **kwargs)
    ref = seeded(link_loader(data, neg_sampling="binary"))
    edges = data.edge_index.t().tolist()
    for a, b in zip(seeded(loader), ref):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_label_index, b.edge_label_index)
        nodes = set(a.n_id.tolist())
        assert sorted(map(list, a.n_id[a.edge_index].t().tolist())) == sorted(
            e for e in edges if e[0] in nodes and e[1] in nodes)
        assert torch.equal(data.edge_index[:, a.e_id], a.n_id[a.edge_index])
        assert torch.equal(a.edge_attr, data.edge_attr[a.e_id])
    with pytest.raises(ValueError, match="disjoint=True with subgraph_type='induced' is not accepted"):
        link_loader(data, subgraph_type="induced", disjoint=True)


def test_induced_heterogeneous_link_batches():
    data = make_hetero()
    kw = dict(edge_label_index=(BUYS, None), neg_sampling="binary")
    ref = seeded(link_loader(data, **kw))
    got = seeded(link_loader(data, subgraph_type="induced", **kw))
    for a, b in zip(got, ref):
        for t in data.node_types:
            assert torch.equal(a[t].n_id, b[t].n_id)
        for e in data.edge_types:
            src, _, dst = e
            s, d = set(a[src].n_id.tolist()), set(a[dst].n_id.tolist())
            want = sorted(x for x in data[e].edge_index.t().tolist() if x[0] in s and x[1] in d)
            ei = a[e].edge_index
            assert sorted(torch.stack([a[src].n_id[ei[0]], a[dst].n_id[ei[1]]]).t().tolist()) == want
        assert torch.equal(a[BUYS].edge_label_index, b[BUYS].edge_label_index)


@pytest.mark.parametrize("neg", [None, "binary"])
def test_edge_level_temporal_sampling_keeps_edges_no_later_than_their_example(neg):
    data = make_data()
    data.etime = torch.randint(0, 100, (data.edge_index.size(1),), generator=torch.Generator().manual_seed(6))
    edge_label_time = torch.randint(20, 100, (data.edge_index.size(1),), generator=torch.Generator().manual_seed(7))
    loader = link_loader(data, edge_label_time=edge_label_time, time_attr="etime", neg_sampling=neg,
                         num_neighbors=[-1, 3])
    n = 0
    for batch in loader:
        seed_time = edge_label_time[batch.input_id]
        width = batch.edge_label_index.size(1)
        assert torch.equal(batch.edge_label_time, seed_time.repeat(width // seed_time.numel()))
        example = batch.batch[batch.edge_index[1]]  # the example the edge's subgraph belongs to
        assert bool((data.etime[batch.e_id] <= seed_time[example]).all())
        assert torch.equal(batch.etime, data.etime[batch.e_id])
        assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])
        n += batch.e_id.numel()
    assert n > 0


def test_rank_and_world_size_split_the_seed_edges_and_set_epoch_reshuffles_alike():
    data = make_data()
    edges = data.edge_index[:, :600]

    def ranks(epoch=0):
        out = []
        for r in range(3):
            loader = link_loader(data, edge_label_index=edges, shuffle=True, rank=r, world_size=3)
            loader.set_epoch(epoch)  # the shuffle of torch's DistributedSampler: the same on every rank
            out.append([b.input_id for b in loader])
        return out

    first = ranks()
    ids = [torch.cat(p) for p in first]
    assert [i.numel() for i in ids] == [200, 200, 200] and [len(p) for p in first] == [10, 10, 10]
    assert torch.equal(torch.cat(ids).sort().values, torch.arange(600))  # disjoint and covering
    again = ranks(1)
    moved = [torch.cat(p) for p in again]
    assert torch.equal(torch.cat(moved).sort().values, torch.arange(600))
    assert not torch.equal(torch.cat(moved), torch.cat(ids))  # a new shuffle, shared by the ranks
    assert [torch.equal(a, b) for a, b in zip(moved, [torch.cat(p) for p in ranks(1)])] == [True] * 3
    torch.manual_seed(0)  # the global RNG moves the sampling seeds, never the shares
    assert [torch.equal(torch.cat(p), i) for p, i in zip(ranks(), ids)] == [True] * 3
    with pytest.raises(ValueError, match="rank=3 is not accepted"):
        link_loader(data, rank=3, world_size=3)


def test_persistent_workers_give_the_batches_of_a_fresh_loader_each_epoch():
    data = make_data()
    kw = dict(neg_sampling="binary", shuffle=True, edge_label_index=data.edge_index[:, :200])

    def epochs(**options):
        loader = link_loader(data, generator=torch.Generator().manual_seed(7), **kw, **options)
        out = []
        for epoch in range(2):
            torch.manual_seed(epoch)
            out.append([(b.input_id.tolist(), b.n_id.tolist(), b.edge_label_index.tolist()) for b in loader])
        return out

    persistent = epochs(num_workers=1, persistent_workers=True)
    assert persistent[0] != persistent[1]
    assert epochs(num_workers=1, persistent_workers=False) == persistent
    assert epochs(num_workers=0) == persistent


@pytest.mark.parametrize("option", [dict(features="zero_copy"), dict(features="worker"), dict(features="auto"),
                                    dict(device_cache=1 << 16)])
def test_feature_options_on_the_cpu_do_what_the_node_loader_does(option):
    from ibp_graph.loaders.pyg import CompressedNeighborLoader

    data = make_data()
    edges = data.edge_index[:, :BATCH]
    try:
        node = CompressedNeighborLoader(data, [3, 2], batch_size=BATCH, device="cpu", **option)
    except Exception as err:  # the link loader refuses it alike
        with pytest.raises(type(err), match=str(err)[:40]):
            link_loader(data, edge_label_index=edges, **option)
        return
    link = link_loader(data, edge_label_index=edges, neg_sampling="binary", **option)
    assert link.features.mode == node.features.mode
    assert {k: type(v).__name__ for k, v in link.features.node_attrs.items()} == \
        {k: type(v).__name__ for k, v in node.features.node_attrs.items()}
    (batch,) = list(link)
    check_subgraph(batch, data.x)


@pytest.mark.parametrize("neg", [None, "binary", "triplet"])
def test_heterogeneous_stores_give_the_link_batches_of_the_hetero_data(neg):
    from torch_geometric.testing import MyFeatureStore

    data = make_hetero()
    fs = MyFeatureStore()
    for t in data.node_types:
        fs.put_tensor(data[t].x, group_name=t, attr_name="x", index=None)
    gs = graph_store({e: data[e].edge_index for e in data.edge_types}, "coo",
                     {e: (data[e[0]].num_nodes, data[e[-1]].num_nodes) for e in data.edge_types})
    kw = dict(edge_label_index=(BUYS, data[BUYS].edge_index[:, :200]), neg_sampling=neg)
    stripped = HeteroData()
    for t in data.node_types:
        stripped[t].x = data[t].x
    for e in data.edge_types:
        stripped[e].edge_index = data[e].edge_index
    want = seeded(link_loader(stripped, **kw))
    got = seeded(link_loader((fs, gs), **kw))
    assert len(want) == len(got) == 10
    for a, b in zip(want, got):
        for t in data.node_types:
            for key in ("x", "n_id"):
                assert torch.equal(a[t][key], b[t][key]), (t, key)
        for e in data.edge_types:
            assert torch.equal(a[e].edge_index, b[e].edge_index) and torch.equal(a[e].e_id, b[e].e_id), e
        for store_a, store_b in ((a[BUYS], b[BUYS]), (a["user"], b["user"]), (a["item"], b["item"])):
            for key in ("edge_label_index", "edge_label", "input_id", "src_index", "dst_pos_index",
                        "dst_neg_index"):
                if key in store_a:
                    assert torch.equal(store_a[key], store_b[key]), key


@pytest.mark.parametrize("ids", [lambda e: e.astype("int64") * 2,  # ids of a larger graph
                                 lambda e: (e.astype("int64") + 2**31).astype("uint32")])  # of > 2**31 edges
def test_all_edges_of_a_prepared_graph_whose_edge_ids_are_not_positions(ids):
    from ibp_graph.sampling.graph import CSCGraph

    data = make_data()
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes)
    shifted = CSCGraph(graph.indptr, graph.indices, ids(graph.e_id))
    loader = link_loader(({"x": data.x}, shifted), edge_label_index=None, batch_size=2000)
    batch = next(iter(loader))
    assert sorted(map(tuple, batch.n_id[batch.edge_label_index].t().tolist())) == \
        sorted(map(tuple, data.edge_index.t().tolist()))


def test_node_times_are_checked_once_at_construction_not_at_every_batch(monkeypatch):
    import ibp_graph.sampling.links as links

    data = make_data()
    edge_label_time = torch.randint(0, 100, (data.edge_index.size(1),), generator=torch.Generator().manual_seed(3))
    kw = dict(edge_label_time=edge_label_time, time_attr="time", neg_sampling="binary")
    ref = seeded(link_loader(data, **kw))
    loader = link_loader(data, **kw)
    calls = []
    check = links.check_time
    monkeypatch.setattr(links, "check_time", lambda name, value, count: calls.append(name) or check(name, value, count))
    got = seeded(loader)
    assert not any("node_time" in name for name in calls)
    for a, b in zip(got, ref):
        same_batch(a, b)


@pytest.mark.parametrize("neg", [None, "binary", ("triplet", 2)])
def test_stored_supervision_edges_do_not_break_the_batches_as_in_pyg(neg):
    """RandomLinkSplit's layout: the Data carries edge_label_index [2, L] and edge_label [L]; with L equal to the
    node count PyG's filter_data selects both as node attributes (edge_label_index along its cat dim -1) and
    LinkLoader then overwrites them with the batch's (triplet: deletes edge_label_index, keeps edge_label)."""
    data = make_data()
    n = data.num_nodes
    g = torch.Generator().manual_seed(7)
    eli, label = torch.randint(0, n, (2, n), generator=g), torch.randint(0, 2, (n,), generator=g).float()
    stored = data.clone()
    stored.edge_label_index, stored.edge_label = eli, label
    kw = dict(edge_label_index=eli, neg_sampling=neg, edge_label=None if neg and neg[0] == "triplet" else label)
    ref = seeded(link_loader(data, **kw))
    got = seeded(link_loader(stored, **kw))
    assert len(got) == len(ref) == n // BATCH
    for a, b in zip(got, ref):
        if neg and neg[0] == "triplet":
            assert "edge_label_index" not in a and torch.equal(a.edge_label, label[a.n_id])
            del a.edge_label
        same_batch(a, b)


def test_stored_index_attributes_are_selected_along_their_cat_dim_as_pyg_and_link_fields_replace_them():
    """PyG's filter_data / filter_hetero_data select an attribute along its __cat_dim__ (-1 for an index):
    node loader batches hold edge_label_index[:, n_id] (Data, L == num_nodes) and [:, e_id] (an edge type's,
    L == its edge count); link batches get their own link fields instead (triplet: edge_label is kept)."""
    from torch_geometric.loader.utils import filter_data, filter_hetero_data

    from ibp_graph.loaders.pyg import CompressedNeighborLoader

    g = torch.Generator().manual_seed(7)
    homo = make_data()
    homo.edge_label_index = torch.randint(0, homo.num_nodes, (2, homo.num_nodes), generator=g)
    homo.edge_label = torch.rand(homo.num_nodes, generator=g)
    homo.face = torch.randint(0, homo.num_nodes, (3, homo.num_nodes), generator=g)  # cat dim -1 as well
    for b in CompressedNeighborLoader(homo, [3, 2], batch_size=BATCH, device="cpu"):
        ref = filter_data(homo, b.n_id, b.edge_index[0], b.edge_index[1], b.e_id, None)
        for key in ("edge_label_index", "edge_label", "face"):
            assert _same(b[key], ref[key]), key
    hetero = make_hetero()
    eli = hetero[BUYS].edge_index.flip(1)
    for num in (100, hetero[BUYS].num_edges):  # graph-level in PyG; or one per edge: selected by e_id
        stored = hetero.clone()
        stored[BUYS].edge_label_index, stored[BUYS].edge_label = eli[:, :num], torch.rand(num, generator=g)
        for b in CompressedNeighborLoader(stored, [3, 2], input_nodes="user", batch_size=BATCH, device="cpu"):
            ref = filter_hetero_data(stored, b.n_id_dict, {e: s.edge_index[0] for e, s in b.edge_items()},
                                     {e: s.edge_index[1] for e, s in b.edge_items()}, b.e_id_dict, None)
            for key in ("edge_label_index", "edge_label"):
                assert _same(b[BUYS][key], ref[BUYS][key]), key
        for neg in ("binary", "triplet"):
            kw = dict(edge_label_index=(BUYS, eli[:, :100]), neg_sampling=neg)
            for a, b in zip(seeded(link_loader(stored, **kw)), seeded(link_loader(hetero, **kw))):
                if neg == "triplet":  # PyG deletes edge_label_index and keeps edge_label, selected if per edge
                    assert "edge_label_index" not in a[BUYS]
                    assert a[BUYS].edge_label.numel() == (100 if num == 100 else a[BUYS].e_id.numel())
                    del a[BUYS].edge_label
                same_batch(a, b)


def _timed_link_case(neg, hetero):
    """A graph, the edge store its examples come from (None: homogeneous) and link-loader arguments with
    example times and input ids offset from the edge positions."""
    data = make_hetero() if hetero else make_data()
    store = BUYS if hetero else None
    num = (data[BUYS] if hetero else data).edge_index.size(1)
    times = torch.randint(0, 100, (num,), generator=torch.Generator().manual_seed(3))
    kw = dict(neg_sampling=neg, edge_label_time=times, time_attr="time", input_id=torch.arange(num) + 1000)
    if hetero:
        kw["edge_label_index"] = BUYS
    return data, store, kw


def _link_metadata(batch, neg, store=None):
    """PyG's out.metadata of a finished batch: what LinkLoader.filter_fn reads each field from."""
    s = batch if store is None else batch[store]
    if neg != "triplet":
        return s.input_id, s.edge_label_index, s.get("edge_label"), s.get("edge_label_time")
    src, dst = (batch, batch) if store is None else (batch[store[0]], batch[store[-1]])
    return s.input_id, src.src_index, dst.dst_pos_index, dst.dst_neg_index, src.get("seed_time")


def _same(a, b):
    return a is None and b is None or isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and \
        a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.parametrize("hetero", [False, True])
@pytest.mark.parametrize("neg", [None, "binary", "triplet"])
def test_transform_sampler_output_gets_pygs_link_metadata_and_the_batch_takes_its_edits(neg, hetero):
    """PyG's edge_sample puts (input_id, edge_label_index, edge_label, edge_label_time) (binary, none) or
    (input_id, src_index, dst_pos_index, dst_neg_index, seed_time) (triplet) on out.metadata, and the batch's
    fields are read from the transformed output's metadata (LinkLoader.filter_fn)."""
    from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput

    data, store, kw = _timed_link_case(neg, hetero)
    seen = []

    def record(out):
        assert isinstance(out, HeteroSamplerOutput if hetero else SamplerOutput)
        seen.append(out.metadata)
        return out

    def edit(out):  # keep the first half of the examples' fields and reverse them
        input_id, *fields = out.metadata
        k = (input_id.numel() + 1) // 2
        out.metadata = (input_id[:k].flip(0), *(None if f is None else f[..., :k].flip(-1) if f.dim() == 2 and
                                                neg != "triplet" else f[:k].flip(0) for f in fields))
        return out

    ref = seeded(link_loader(data, **kw))
    got = seeded(link_loader(data, transform_sampler_output=record, **kw))
    assert len(seen) == len(got) == len(ref)
    for a, b, md in zip(got, ref, seen):
        same_batch(a, b)
        assert len(md) == (5 if neg == "triplet" else 4)
        assert all(_same(x, y) for x, y in zip(md, _link_metadata(b, neg, store)))
    for a, b in zip(seeded(link_loader(data, transform_sampler_output=edit, **kw)), ref):
        md_b = _link_metadata(b, neg, store)
        k = (md_b[0].numel() + 1) // 2
        expect = (md_b[0][:k].flip(0), *(None if f is None else f[..., :k].flip(-1) if f.dim() == 2 and
                                         neg != "triplet" else f[:k].flip(0) for f in md_b[1:]))
        assert all(_same(x, y) for x, y in zip(_link_metadata(a, neg, store), expect))
        assert torch.equal((a[BUYS] if hetero else a).edge_index, (b[BUYS] if hetero else b).edge_index)


@pytest.mark.parametrize("hetero", [False, True])
@pytest.mark.parametrize("neg", [None, "binary", "triplet"])
def test_link_metadata_a_transform_gives_other_dtypes_reaches_the_batch_in_them(neg, hetero):
    """As PyG's filter_fn, the batch's link fields are the metadata's tensors, in whatever dtype the transform
    left (int32 ids, float64 labels and times): groups the set-up did not see travel as identity."""
    data, store, kw = _timed_link_case(neg, hetero)
    other = {torch.int64: torch.int32, torch.float32: torch.float64}

    def retype(out):
        out.metadata = tuple(None if f is None else f.to(other.get(f.dtype, f.dtype)) for f in out.metadata)
        return out

    ref = seeded(link_loader(data, **kw))
    got = seeded(link_loader(data, transform_sampler_output=retype, **kw))
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        for x, y in zip(_link_metadata(a, neg, store), _link_metadata(b, neg, store)):
            assert (x is None) == (y is None)
            if y is not None:
                assert x.dtype == other.get(y.dtype, y.dtype) and torch.equal(x, y.to(x.dtype))


@pytest.mark.parametrize("hetero", [False, True])
@pytest.mark.parametrize("neg", [None, "binary", "triplet"])
def test_link_fields_a_transform_sets_to_none_are_left_out_as_pyg(neg, hetero):
    """PyG's filter_fn assigns every link field from the metadata (``data.edge_label_index = out.metadata[1]``,
    ``src_index`` ...): one a transform set to None is absent from the batch (PyG's storage drops a None), the others
    are the batch's as without the transform."""
    data, store, kw = _timed_link_case(neg, hetero)
    names = ("src_index", "dst_pos_index", "dst_neg_index", "seed_time") if neg == "triplet" else \
        ("edge_label_index", "edge_label", "edge_label_time")

    def clear(out):  # every link field, input_id kept
        out.metadata = (out.metadata[0],) + (None,) * (len(out.metadata) - 1)
        return out

    ref = seeded(link_loader(data, **kw))
    got = seeded(link_loader(data, transform_sampler_output=clear, **kw))
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        for s in a.stores:
            assert not any(name in s for name in names), s._key
        for key in ("input_id", "edge_index", "n_id"):
            s_a, s_b = (a, b) if store is None else (a[store], b[store])
            if key in s_b:
                assert torch.equal(s_a[key], s_b[key]), key
