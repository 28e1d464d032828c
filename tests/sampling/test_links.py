"""Link sampling seeds (sampling.links): field by field against PyG's own ``edge_sample`` given the same
negatives, PyG's negative draws in distribution, and the layout's properties."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats
from torch_geometric.data import Data
from torch_geometric.loader import LinkNeighborLoader
from torch_geometric.sampler import HeteroSamplerOutput as PygHeteroOutput
from torch_geometric.sampler import NegativeSampling as PygNegativeSampling
from torch_geometric.sampler import SamplerOutput as PygOutput
from torch_geometric.sampler.base import EdgeSamplerInput
from torch_geometric.sampler.neighbor_sampler import edge_sample, neg_sample

from ibp_graph.sampling import CSCGraph, NeighborSampler
from ibp_graph.sampling.links import NegativeSampling, link_seeds, prepare_edge_label, sample_negatives

pytestmark = pytest.mark.filterwarnings("ignore:Using 'NeighborSampler' without a 'pyg-lib'")

HOMO = None
LOOP = ("paper", "cites", "paper")        # a heterogeneous edge type within one node type
BIPARTITE = ("user", "buys", "item")       # two node types


# ----------------------------------------------------------------------------------
# PyG's edge_sample with our negatives injected


class _Injected(PygNegativeSampling):
    """PyG's NegativeSampling whose draws are given (ours), so edge_sample's layout can be compared exactly."""

    def __init__(self, mode, amount, draws):
        super().__init__(mode, amount)
        self.draws = draws

    def sample(self, num_samples, endpoint, num_nodes=None):
        out = self.draws[endpoint]
        assert out.numel() == num_samples
        return out


def _pyg(src, dst, num_nodes, edge_type, disjoint, mode, amount, ours, label=None, time=None):
    """PyG's edge_sample on the same positives with `ours`' negatives: (seeds, seed times, metadata)."""
    seen = {}

    def sample_fn(seed, seed_time):
        seen["seed"], seen["time"] = seed, seed_time
        if isinstance(seed, dict):
            return PygHeteroOutput(node=seed, row={}, col={}, edge={},
                                   batch={k: torch.arange(v.numel()) for k, v in seed.items()} if disjoint else None)
        return PygOutput(node=seed, row=torch.empty(0), col=torch.empty(0), edge=None,
                         batch=torch.arange(seed.numel()) if disjoint else None)

    neg = None if mode is None else _Injected(mode, amount, {"src": ours.src_neg, "dst": ours.dst_neg})
    inputs = EdgeSamplerInput(torch.arange(len(src)), torch.as_tensor(src), torch.as_tensor(dst), label, time,
                              edge_type)
    if edge_type is None:
        nodes = num_nodes[0]
    else:
        nodes = {edge_type[0]: num_nodes[0], edge_type[-1]: num_nodes[1]}
    out = edge_sample(inputs, sample_fn, nodes, disjoint, None, neg)
    return seen["seed"], seen["time"], out.metadata


def _same(a, b, what):
    if a is None or b is None:
        assert a is None and b is None, what
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), what
        for k in a:
            _same(a[k], b[k], f"{what}[{k!r}]")
    else:
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), (what, a, b)


def _check_against_pyg(src, dst, num_nodes, edge_type, disjoint, mode, amount, seed, label=None, time=None,
                       weights=(None, None)):
    neg = None if mode is None else NegativeSampling(mode, amount, *weights)
    ours = link_seeds(src, dst, num_src_nodes=num_nodes[0], num_dst_nodes=num_nodes[1], seed=seed,
                      neg_sampling=neg, edge_label=label, edge_label_time=time, disjoint=disjoint,
                      edge_type=edge_type)
    seeds, seed_time, meta = _pyg(src, dst, num_nodes, edge_type, disjoint, mode, amount, ours, label, time)
    _same(ours.seeds, seeds, "seeds")
    _same(ours.seed_time, seed_time, "seed_time")
    assert ours.num_pos == len(src)
    assert ours.num_neg == (0 if mode is None else math.ceil(len(src) * amount))
    if mode == "triplet":
        _, src_index, dst_pos, dst_neg, t = meta
        _same(ours.src_index, src_index, "src_index")
        _same(ours.dst_pos_index, dst_pos, "dst_pos_index")
        _same(ours.dst_neg_index, dst_neg, "dst_neg_index")
        _same(ours.edge_label_time, t, "seed_time")
        assert ours.edge_label_index is None and ours.edge_label is None
    else:
        _, edge_label_index, edge_label, t = meta
        _same(ours.edge_label_index, edge_label_index, "edge_label_index")
        _same(ours.edge_label, edge_label, "edge_label")
        _same(ours.edge_label_time, t, "edge_label_time")
        assert ours.src_index is None and ours.dst_pos_index is None and ours.dst_neg_index is None
    return ours


GRID = [(edge_type, disjoint, mode, amount)
        for edge_type in (HOMO, LOOP, BIPARTITE)
        for disjoint in (False, True)
        for mode, amount in ((None, 1), ("binary", 1), ("binary", 2), ("binary", 0.3), ("triplet", 1),
                             ("triplet", 3))]


@pytest.mark.parametrize("edge_type,disjoint,mode,amount", GRID)
def test_equals_pygs_edge_sample_field_by_field(edge_type, disjoint, mode, amount):
    rng = np.random.default_rng(7)
    num_nodes = (30, 30) if edge_type != BIPARTITE else (25, 40)
    src = torch.from_numpy(rng.integers(0, num_nodes[0], 17))
    dst = torch.from_numpy(rng.integers(0, num_nodes[1], 17))
    _check_against_pyg(src, dst, num_nodes, edge_type, disjoint, mode, amount, seed=11)


@pytest.mark.parametrize("edge_type", [HOMO, LOOP, BIPARTITE])
@pytest.mark.parametrize("mode,amount", [(None, 1), ("binary", 1), ("binary", 1.5), ("triplet", 2)])
@pytest.mark.parametrize("time_dtype", [torch.int64, torch.float32])
def test_temporal_seed_times_equal_pygs(edge_type, mode, amount, time_dtype):
    rng = np.random.default_rng(3)
    num_nodes = (20, 20) if edge_type != BIPARTITE else (20, 35)
    src = torch.from_numpy(rng.integers(0, num_nodes[0], 9))
    dst = torch.from_numpy(rng.integers(0, num_nodes[1], 9))
    time = torch.from_numpy(rng.integers(0, 100, 9)).to(time_dtype)
    ours = _check_against_pyg(src, dst, num_nodes, edge_type, True, mode, amount, seed=2, time=time)
    # negative j carries positive j % num_pos's time
    src_time = ours.seed_time if edge_type is None else ours.seed_time[(edge_type or LOOP)[0]]
    assert torch.equal(src_time[: ours.num_pos], time)


@pytest.mark.parametrize("edge_type", [HOMO, BIPARTITE])
@pytest.mark.parametrize("label", [torch.tensor([1, 2, 1, 3, 2]), torch.rand(5, 3), torch.tensor([True] * 5)])
@pytest.mark.parametrize("mode", [None, "binary"])
def test_user_labels_equal_pygs(edge_type, label, mode):
    src, dst = torch.tensor([0, 4, 2, 2, 1]), torch.tensor([3, 3, 0, 1, 4])
    ours = _check_against_pyg(src, dst, (6, 6), edge_type, False, mode, 2, seed=9, label=label)
    if mode == "binary":  # negatives labelled zero, of the labels' dtype and trailing shape
        assert ours.edge_label.shape == (15,) + tuple(label.shape[1:])
        assert not ours.edge_label[5:].any()


def test_default_labels_are_float_ones_then_zeros_as_pygs_test():
    ours = link_seeds(torch.arange(10), torch.arange(10), num_src_nodes=10, num_dst_nodes=10, seed=0,
                      neg_sampling="binary")
    assert ours.edge_label.dtype == torch.float32
    assert ours.edge_label[:10].eq(1).all() and ours.edge_label[10:].eq(0).all()


edge_types = st.sampled_from([HOMO, LOOP, BIPARTITE])
modes = st.sampled_from([(None, 1), ("binary", 1), ("binary", 0.7), ("binary", 3), ("triplet", 1), ("triplet", 2)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edge_type=edge_types, mode=modes, disjoint=st.booleans(), temporal=st.booleans(),
       num_pos=st.integers(1, 30), n_src=st.integers(1, 12), n_dst=st.integers(1, 12),
       seed=st.integers(0, 2**62), data=st.data())
def test_any_batch_equals_pygs_and_points_at_its_endpoints(edge_type, mode, disjoint, temporal, num_pos, n_src,
                                                           n_dst, seed, data):
    if edge_type != BIPARTITE:
        n_dst = n_src
    src = torch.tensor(data.draw(st.lists(st.integers(0, n_src - 1), min_size=num_pos, max_size=num_pos)))
    dst = torch.tensor(data.draw(st.lists(st.integers(0, n_dst - 1), min_size=num_pos, max_size=num_pos)))
    time = torch.tensor(data.draw(st.lists(st.integers(-5, 5), min_size=num_pos, max_size=num_pos))) \
        if temporal else None
    ours = _check_against_pyg(src, dst, (n_src, n_dst), edge_type, disjoint or temporal, *mode, seed=seed,
                              time=time)
    # the local ids name the endpoints: positives, then negatives
    if edge_type is None:
        src_seeds = dst_seeds = ours.seeds
    else:
        src_seeds, dst_seeds = ours.seeds[edge_type[0]], ours.seeds[edge_type[-1]]
    if mode[0] == "triplet":
        assert torch.equal(src_seeds[ours.src_index], src)
        assert torch.equal(dst_seeds[ours.dst_pos_index], dst)
        neg = dst_seeds[ours.dst_neg_index].reshape(num_pos, -1)
        assert sorted(neg.flatten().tolist()) == sorted(ours.dst_neg.tolist())
        assert ours.dst_neg_index.shape == ((num_pos,) if mode[1] == 1 else (num_pos, mode[1]))
    else:
        want = torch.stack([src, dst])
        if ours.num_neg:
            want = torch.cat([want, torch.stack([ours.src_neg, ours.dst_neg])], dim=1)
            assert 0 <= int(ours.src_neg.min()) and int(ours.src_neg.max()) < n_src
        assert torch.equal(torch.stack([src_seeds[ours.edge_label_index[0]], dst_seeds[ours.edge_label_index[1]]]),
                           want)
    if ours.dst_neg is not None:
        assert 0 <= int(ours.dst_neg.min()) and int(ours.dst_neg.max()) < n_dst
    if not (disjoint or temporal):  # seeds: each endpoint node once, sorted
        for s in (src_seeds, dst_seeds):
            assert torch.equal(s, s.unique())


# ----------------------------------------------------------------------------------
# The draws


def test_same_seed_same_batch_in_any_order_and_other_seeds_differ():
    src, dst = torch.arange(50) % 7, torch.arange(50) % 11
    make = lambda s: link_seeds(src, dst, num_src_nodes=100, num_dst_nodes=100, seed=s,  # noqa: E731
                                neg_sampling=dict(mode="binary", amount=2))
    first = [make(s) for s in (1, 2, 3)]
    again = [make(s) for s in (3, 1, 2)]
    for a, b in zip(first, [again[1], again[2], again[0]]):
        assert torch.equal(a.src_neg, b.src_neg) and torch.equal(a.dst_neg, b.dst_neg)
        assert torch.equal(a.edge_label_index, b.edge_label_index)
    assert not torch.equal(first[0].dst_neg, first[1].dst_neg)
    assert not torch.equal(first[0].src_neg, first[0].dst_neg)  # the endpoints have their own streams


def test_a_negative_depends_only_on_seed_endpoint_and_position():
    # a longer batch extends the draws of a shorter one: no draw depends on the batch's other positives
    neg = NegativeSampling("binary", 1)
    short = sample_negatives(neg, "dst", 10, 1000, seed=5)
    long = sample_negatives(neg, "dst", 40, 1000, seed=5)
    assert np.array_equal(short, long[:10])


def test_uniform_negatives_are_uniform():
    neg = NegativeSampling("binary", 1)
    n = 37
    draws = np.concatenate([sample_negatives(neg, e, 5000, n, seed=s) for s in range(8) for e in ("src", "dst")])
    assert draws.min() >= 0 and draws.max() < n
    counts = np.bincount(draws, minlength=n)
    assert stats.chisquare(counts).pvalue > 1e-4


def test_weighted_negatives_follow_the_weights_and_never_draw_a_zero_weight():
    n = 30
    w = np.random.default_rng(0).random(n)
    w[[0, 5, 29]] = 0.0  # zero weights at the ends too
    neg = NegativeSampling("triplet", 4, dst_weight=torch.from_numpy(w))
    draws = np.concatenate([sample_negatives(neg, "dst", 8000, n, seed=s) for s in range(10)])
    counts = np.bincount(draws, minlength=n)
    assert counts[[0, 5, 29]].sum() == 0
    keep = w > 0
    assert stats.chisquare(counts[keep], draws.size * w[keep] / w[keep].sum()).pvalue > 1e-4


def test_a_single_positive_weight_is_always_drawn():
    w = np.zeros(9)
    w[4] = 0.25
    neg = NegativeSampling("binary", 1, src_weight=w)
    assert (sample_negatives(neg, "src", 1000, 9, seed=1) == 4).all()


def _pyg_temporal_law(node_time, t, n):
    """The distribution of one negative by PyG's neg_sample (uniform draws): accepted at the first draw when no
    later than t, at one of 5 redraws when strictly earlier, else the node of least time."""
    le, lt = node_time <= t, node_time < t
    q0, q = 1 - le.mean(), 1 - lt.mean()
    p = le / n + q0 * lt / n * sum(q ** r for r in range(5))
    p[np.argmin(node_time)] += q0 * q ** 5
    return p


@pytest.mark.parametrize("t", [3, 1])
def test_temporal_negatives_follow_pygs_rejection_law(t):
    n = 12
    node_time = np.array([5, 3, 1, 7, 3, 0, 9, 2, 8, 6, 4, 3])
    law = _pyg_temporal_law(node_time, t, n)
    neg = NegativeSampling("binary", 1)
    reps = 4000
    ours = np.concatenate([sample_negatives(neg, "dst", reps, n, seed=s, seed_time=np.array([t]),
                                            node_time=node_time) for s in range(5)])
    torch.manual_seed(0)
    pyg = neg_sample(torch.zeros(5 * reps, dtype=torch.long), PygNegativeSampling("binary", 1), n,
                     torch.full((5 * reps,), t), torch.from_numpy(node_time), "dst").numpy()
    for draws in (ours, pyg):  # PyG itself fits the law, and so do we
        counts = np.bincount(draws, minlength=n)
        assert counts[law == 0].sum() == 0
        assert stats.chisquare(counts[law > 0], draws.size * law[law > 0]).pvalue > 1e-4


def test_temporal_negatives_exist_at_their_positives_time_through_link_seeds():
    n = 50
    node_time = np.arange(n) * 2
    time = torch.tensor([10, 40, 90, 0])
    ours = link_seeds(torch.tensor([1, 2, 3, 0]), torch.tensor([4, 5, 6, 0]), num_src_nodes=n, num_dst_nodes=n,
                      seed=3, neg_sampling=dict(mode="binary", amount=2.5), edge_label_time=time, disjoint=True,
                      src_node_time=node_time, dst_node_time=node_time)
    slot_time = time[torch.arange(ours.num_neg) % 4].numpy()
    for negs in (ours.src_neg.numpy(), ours.dst_neg.numpy()):
        assert ((node_time[negs] <= slot_time) | (negs == 0)).all()
    assert torch.equal(ours.edge_label_time, time[torch.arange(4 + ours.num_neg) % 4])


# ----------------------------------------------------------------------------------
# Labels, configuration, errors


@pytest.mark.parametrize("label", [torch.tensor([0, 1, 0]), torch.tensor([1, 2, 1]), torch.tensor([0.0, 3.0, 1.0])])
@pytest.mark.parametrize("neg", [None, "binary", dict(mode="binary", amount=2)])
def test_label_shift_equals_pygs_link_loader(label, neg):
    data = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
    loader = LinkNeighborLoader(data, num_neighbors=[1], edge_label=label, neg_sampling=neg)
    assert torch.equal(prepare_edge_label(label, neg), loader.input_data.label)


def test_cast_takes_pygs_record_and_its_other_forms():
    w = torch.rand(8)
    mine = NegativeSampling.cast(PygNegativeSampling("triplet", 3.0, dst_weight=w))
    assert mine.mode == "triplet" and mine.amount == 3 and isinstance(mine.amount, int)
    assert np.array_equal(mine.dst_weight, w.double().numpy()) and mine.src_weight is None
    assert NegativeSampling.cast("binary").amount == 1
    assert NegativeSampling.cast(("binary", 0.5)).amount == 0.5
    assert NegativeSampling.cast(None) is None


@pytest.mark.parametrize("mode", ["binary", "triplet"])
def test_cast_takes_pygs_negative_sampling_mode_as_pygs_cast_does(mode):
    """PyG's NegativeSampling.cast(NegativeSamplingMode.x) is NegativeSampling(x): the enum is a mode name."""
    from torch_geometric.sampler.base import NegativeSamplingMode

    enum = NegativeSamplingMode(mode)
    want = PygNegativeSampling.cast(enum)
    mine = NegativeSampling.cast(enum)
    assert mine.mode == want.mode.value == mode and mine.amount == want.amount == 1
    assert NegativeSampling.cast(dict(mode=enum, amount=2)).mode == mode
    data = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
    assert LinkNeighborLoader(data, num_neighbors=[1], neg_sampling=enum).neg_sampling.mode == enum


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(mode="ternary"), ValueError, "mode='ternary'"),
    (dict(mode="binary", amount=0), ValueError, "amount=0"),
    (dict(mode="binary", amount=-1.5), ValueError, "amount=-1.5"),
    (dict(mode="binary", amount=float("nan")), TypeError, "amount=nan"),
    (dict(mode="binary", amount=True), TypeError, "amount=True"),
    (dict(mode="triplet", amount=1.5), ValueError, "integer"),
    (dict(mode="binary", src_weight=torch.tensor([1.0, -1.0])), ValueError, r"src_weight\[1\]=-1.0"),
    (dict(mode="binary", dst_weight=torch.zeros(3)), ValueError, "all zeros"),
    (dict(mode="binary", dst_weight=torch.ones(2, 2)), ValueError, "1-d"),
    (dict(mode="binary", dst_weight=[1.0]), TypeError, "list"),
])
def test_negative_sampling_errors_name_the_value(kwargs, error, match):
    with pytest.raises(error, match=match):
        NegativeSampling(**kwargs)


def _call(**over):
    args = dict(src=torch.tensor([0, 1]), dst=torch.tensor([2, 3]), num_src_nodes=5, num_dst_nodes=5, seed=0)
    args.update(over)
    return link_seeds(args.pop("src"), args.pop("dst"), **args)


@pytest.mark.parametrize("over,error,match", [
    (dict(neg_sampling=dict(mode="binary", dst_weight=torch.ones(4))), ValueError, r"dst_weight has 4 .*\(5\)"),
    (dict(neg_sampling="triplet", edge_label=torch.ones(2)), ValueError, "triplet"),
    (dict(edge_label=torch.ones(3)), ValueError, r"edge_label has shape \(3,\)"),
    (dict(edge_label_time=torch.tensor([1, 2])), ValueError, "disjoint=True"),
    (dict(edge_label_time=torch.tensor([1.0, float("nan")]), disjoint=True), ValueError, "NaN"),
    (dict(neg_sampling="binary", src_node_time=torch.arange(5), disjoint=True), ValueError, "edge_label_time"),
    (dict(src=torch.tensor([0, 5])), ValueError, r"src: .*id 5"),
    (dict(dst=torch.tensor([2.0, 3.0])), TypeError, "dst: "),
    (dict(dst=torch.tensor([2])), ValueError, "one destination per source"),
    (dict(src=torch.tensor([], dtype=torch.long), dst=torch.tensor([], dtype=torch.long)), ValueError, "empty"),
    (dict(num_dst_nodes=6), ValueError, "num_src_nodes=5 and num_dst_nodes=6"),
    (dict(edge_type=("a", "b")), ValueError, "edge_type"),
    (dict(seed=1.0), TypeError, "seed"),
    (dict(neg_sampling=3), TypeError, "neg_sampling=3"),
    (dict(src_node_time=torch.arange(4), disjoint=True, edge_label_time=torch.tensor([1, 2])), ValueError,
     r"src_node_time has shape \(4,\)"),
])
def test_link_seeds_errors_name_argument_and_value(over, error, match):
    with pytest.raises(error, match=match):
        _call(**over)


def test_two_node_types_may_differ_in_size_and_weight_only_the_drawn_endpoint():
    # triplet draws destinations only: a source weight of any length is not used (as PyG)
    out = _call(edge_type=BIPARTITE, num_dst_nodes=9, dst=torch.tensor([8, 0]),
                neg_sampling=dict(mode="triplet", amount=2, src_weight=torch.ones(3), dst_weight=torch.ones(9)))
    assert out.dst_neg_index.shape == (2, 2) and set(out.seeds) == {"user", "item"}


def test_seeds_feed_the_neighbour_sampler_and_index_its_nodes():
    rng = np.random.default_rng(1)
    edge_index = torch.from_numpy(rng.integers(0, 40, (2, 300)))
    sampler = NeighborSampler(CSCGraph.from_edge_index(edge_index, 40), [3, 2])
    src, dst = edge_index[:, :16]
    link = link_seeds(src, dst, num_src_nodes=40, num_dst_nodes=40, seed=4, neg_sampling="binary")
    out = sampler.sample(link.seeds, seed=4)
    glob = out.node[link.edge_label_index]
    assert torch.equal(glob, torch.stack([torch.cat([src, link.src_neg]), torch.cat([dst, link.dst_neg])]))


def test_the_configuration_travels_to_workers_by_pickle_and_draws_alike():
    import pickle

    neg = NegativeSampling("binary", 2, src_weight=torch.rand(20), dst_weight=torch.rand(20))
    copy = pickle.loads(pickle.dumps(neg))
    for endpoint in ("src", "dst"):
        assert np.array_equal(sample_negatives(neg, endpoint, 50, 20, seed=8),
                              sample_negatives(copy, endpoint, 50, 20, seed=8))
