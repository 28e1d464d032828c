"""Weighted draws at the ends of float64's range: weights whose sum per node overflows to inf (refused with
replacement, which draws a point below the sum; drawn by their ratios without), weights so small that the
keys log(u) / w overflow or u * sum is subnormal (drawn by their ratios), and ordinary weights (drawn exactly
as before these cases were handled: same seed, same sample)."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
from scipy import stats

from ibp_graph.sampling import CSCGraph, NeighborSampler
from ibp_graph.sampling.graph import TypedCSC
from ibp_graph.sampling.hetero import HeteroNeighborSampler
from ibp_graph.sampling.links import NegativeSampling

WRITES = ("author", "writes", "paper")
COPIES = 20_000  # copies of one seed: each draws from its own stream


def star(weights, **kw) -> NeighborSampler:
    """Node 0's in-edges come from nodes 1..d, edge j weighing weights[j]; fan-out kw['fan'] (default 1)."""
    d = len(weights)
    ei = torch.tensor([list(range(1, d + 1)), [0] * d])
    fan = kw.pop("fan", 1)
    return NeighborSampler(CSCGraph.from_edge_index(ei, d + 1), [fan], weight=weights, **kw)


def edge_counts(sampler, d: int) -> np.ndarray:
    out = sampler.sample(torch.zeros(COPIES, dtype=torch.int64), seed=3)
    return np.bincount(out.edge.numpy(), minlength=d)


def test_with_replacement_weights_whose_sum_overflows_float64_are_refused_by_name():
    """The sum of 1e308 and 1e308 is inf: u * inf is inf, and every draw took the last edge (the one of weight 1)."""
    w = np.array([1e308, 1e308, 1.0])
    with pytest.raises(ValueError, match=r"^weight: the 3 in-edges of node 0 have weights summing to inf in "
                                         r"float64 \(the largest: 1e\+308\), which replace=True cannot draw from; "
                                         r"accepted with replace=True: weights whose sum over each node's in-edges "
                                         r"is finite"):
        star(w, replace=True)
    ei = {WRITES: torch.tensor([[0, 1, 2, 0], [1, 1, 1, 0]])}  # paper 1's three in-edges overflow, paper 0's not
    graphs = {WRITES: TypedCSC.from_edge_index(ei[WRITES], 3, 2)}
    weight = {WRITES: torch.tensor([1e308, 1e308, 1.0, 1e308], dtype=torch.float64)}
    with pytest.raises(ValueError, match=r"^weight\[\('author', 'writes', 'paper'\)\]: the 3 in-edges of 'paper' "
                                         r"node 1 have weights summing to inf"):
        HeteroNeighborSampler({"author": 3, "paper": 2}, graphs, [2], weight=weight, replace=True)
    # the same weights without replacement, and fan-outs that take every in-edge, do not add them up
    HeteroNeighborSampler({"author": 3, "paper": 2}, graphs, [2], weight=weight)
    HeteroNeighborSampler({"author": 3, "paper": 2}, graphs, [-1, 0], weight=weight, replace=True)


def test_without_replacement_huge_weights_are_drawn_by_their_ratios():
    w = np.array([1e308, 1e308, 1e308, 1.0])  # summing to inf; keys log(u) / 1e308 are subnormal or 0
    counts = edge_counts(star(w), 4)
    assert counts[3] == 0
    assert stats.chisquare(counts[:3]).pvalue > 1e-4


def test_float32_weights_near_their_maximum_are_added_in_float64():
    w = torch.tensor([3e38, 3e38, 1e38, 0.0], dtype=torch.float32)  # summing past float32's 3.4e38
    for replace in (True, False):
        counts = edge_counts(star(w, replace=replace), 4)
        assert counts[3] == 0
        assert stats.chisquare(counts[:3], COPIES * np.array([3, 3, 1]) / 7).pvalue > 1e-4


def test_without_replacement_tiny_weights_are_drawn_by_their_ratios():
    """log(u) / 1e-310 is -inf for almost every u: the keys tied and the first edge won every draw."""
    counts = edge_counts(star(np.full(4, 1e-310)), 4)
    assert stats.chisquare(counts).pvalue > 1e-4
    # two draws: the weight-1 edge first, then either tiny one, as often as the other
    counts = edge_counts(star(np.array([1.0, 1e-310, 1e-310, 0.0]), fan=2), 4)
    assert counts[0] == COPIES and counts[3] == 0
    assert stats.chisquare(counts[1:3]).pvalue > 1e-4
    # ratio 1 : 20 among subnormal weights
    counts = edge_counts(star(np.array([5e-324, 1e-322])), 2)
    assert stats.binomtest(int(counts[0]), COPIES, 1 / 21).pvalue > 1e-4


def test_with_replacement_subnormal_weights_are_drawn_by_their_ratios():
    """u * 1.04e-322 is a subnormal rounded to a multiple of 5e-324: the first edge was drawn with probability
    1/42, not 1/21."""
    counts = edge_counts(star(np.array([5e-324, 1e-322]), replace=True), 2)
    assert stats.binomtest(int(counts[0]), COPIES, 1 / 21).pvalue > 1e-4


def test_ordinary_weights_draw_the_samples_they_drew_before():
    """float64 and float32 weights over ten orders of magnitude, some zero: the digests of four samples each,
    recorded with the sampler before the ends of float64's range were handled (commit 6559dc1)."""
    rng = np.random.default_rng(5)
    n, m = 300, 6000
    ei = np.stack([rng.integers(0, n, m), rng.integers(0, n, m)])
    graph = CSCGraph.from_edge_index(torch.from_numpy(ei), n)
    raw = rng.random(m) * 10.0 ** rng.integers(-5, 6, m)
    raw[rng.random(m) < 0.1] = 0.0
    seeds = torch.from_numpy(rng.choice(n, 40, replace=False))
    want = {False: "cd1b5e96999de537", True: "60ce4e212d0bad69"}
    for dtype in ("float64", "float32"):
        for replace in (False, True):
            sampler = NeighborSampler(graph, [5, 3], weight=torch.from_numpy(raw.astype(dtype)), replace=replace,
                                      parallel=False)
            digest = hashlib.sha256()
            for seed in range(4):
                out = sampler.sample(seeds, seed=seed)
                for a in (out.node, out.row, out.col, out.edge):
                    digest.update(a.numpy().tobytes())
            assert digest.hexdigest()[:16] == want[replace], (dtype, replace)


def test_negative_sampling_weights_whose_sum_overflows_float64_are_refused_by_name():
    """The node weights' running sum reached inf: every negative was the node where it did."""
    with pytest.raises(ValueError, match=r"^NegativeSampling dst_weight sums to inf in float64 \(the largest weight: "
                                         r"1e\+308\); accepted: weights whose sum is finite in float64"):
        NegativeSampling("binary", 1, None, np.array([1.0, 1e308, 1e308]))
    NegativeSampling("binary", 1, None, np.array([1.0, 8e307, 8e307]))  # 1.6e308: finite


def test_negative_sampling_subnormal_weights_are_drawn_by_their_ratios():
    """u * 1.04e-322 is a subnormal rounded to a multiple of 5e-324: node 0 was drawn with probability 1/42, not 1/21
    (and with weights scaled by a power of two, exactly as before)."""
    from ibp_graph.sampling.links import sample_negatives

    def counts(weights):
        neg = NegativeSampling("binary", 1, None, np.array(weights))
        return np.bincount(sample_negatives(neg, "dst", COPIES, 2, seed=3), minlength=2)

    tiny = counts([5e-324, 1e-322])
    assert stats.binomtest(int(tiny[0]), COPIES, 1 / 21).pvalue > 1e-4
    assert np.array_equal(counts([2.0 ** -1074 * 2 ** 60, 2.0 ** -1074 * 2 ** 60 * 20]), counts([1.0, 20.0]))
