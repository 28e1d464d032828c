"""Neighbour sampler: checked edge by edge against a brute-force reference."""
from __future__ import annotations

import itertools
import json
import re
import math
import multiprocessing as mp
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numba
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ibp_graph.sampling import CSCGraph, NeighborSampler, SamplerOutput

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------------
# Reference


def random_edge_index(rng: np.random.Generator, num_nodes: int, num_edges: int) -> torch.Tensor:
    """Random multigraph (self-loops and parallel edges allowed), skewed degrees."""
    if num_nodes == 0:
        return torch.empty(2, 0, dtype=torch.int64)
    weights = rng.pareto(1.5, num_nodes) + 0.05
    dst = rng.choice(num_nodes, num_edges, p=weights / weights.sum())
    src = rng.integers(0, num_nodes, num_edges)
    return torch.from_numpy(np.stack([src, dst]).astype(np.int64))


def in_edges(edge_index: torch.Tensor, num_nodes: int) -> list[list[int]]:
    """Edge ids pointing to each node, in original order (brute force)."""
    out: list[list[int]] = [[] for _ in range(num_nodes)]
    for e, v in enumerate(edge_index[1].tolist()):
        out[v].append(e)
    return out


def check_output(out: SamplerOutput, edge_index: torch.Tensor, num_nodes: int,
                 seeds: list[int], num_neighbors: list[int], replace: bool) -> None:
    """Assert every property of a sample that does not depend on the random draws."""
    src_of, dst_of = edge_index[0].tolist(), edge_index[1].tolist()
    ins = in_edges(edge_index, num_nodes)
    node, row, col, edge = (out.node.tolist(), out.row.tolist(), out.col.tolist(),
                            out.edge.tolist())
    for t in (out.node, out.row, out.col, out.edge):
        assert t.dtype == torch.int64 and t.dim() == 1
    assert len(row) == len(col) == len(edge)
    assert len(out.num_sampled_nodes) == len(num_neighbors) + 1
    assert len(out.num_sampled_edges) == len(num_neighbors)
    assert sum(out.num_sampled_nodes) == len(node)
    assert sum(out.num_sampled_edges) == len(edge)
    assert out.num_sampled_nodes[0] == len(seeds)
    assert node[:len(seeds)] == seeds

    # Local ids: seeds keep their positions; a repeated global id maps to its first one.
    local: dict[int, int] = {}
    for i, s in enumerate(seeds):
        local.setdefault(s, i)
    n_nodes = len(seeds)
    begin, end = 0, len(seeds)
    e0 = 0
    for hop, k in enumerate(num_neighbors):
        n_edges = out.num_sampled_edges[hop]
        hop_cols = col[e0:e0 + n_edges]
        assert hop_cols == sorted(hop_cols), "edges must be grouped by frontier position"
        per_dst: dict[int, list[int]] = {p: [] for p in range(begin, end)}
        for i in range(e0, e0 + n_edges):
            assert begin <= col[i] < end, (hop, col[i], begin, end)
            per_dst[col[i]].append(i)
        for p, idx in per_dst.items():
            v = node[p]
            deg = len(ins[v])
            eids = [edge[i] for i in idx]
            for i, e in zip(idx, eids):
                assert 0 <= e < len(src_of)
                assert dst_of[e] == v, f"edge {e} does not point to node {v}"
                assert node[row[i]] == src_of[e], f"row of edge {e} is not its source"
            assert eids == sorted(eids), "a node's edges must come in CSC order"
            if k == -1 or (not replace and deg <= k):
                assert eids == ins[v], "full neighbourhood must be taken in edge order"
            elif replace:
                assert len(eids) == (k if deg > 0 else 0)
            else:
                assert len(eids) == k
                assert len(set(eids)) == k, "duplicate edge without replacement"
        # Relabelling in first-discovery order (frontier order, then sample order).
        for i in range(e0, e0 + n_edges):
            s = src_of[edge[i]]
            if s not in local:
                local[s] = n_nodes
                assert node[n_nodes] == s, "new nodes must follow first-discovery order"
                n_nodes += 1
            assert row[i] == local[s]
        assert n_nodes - end == out.num_sampled_nodes[hop + 1]
        begin, end = end, n_nodes
        e0 += n_edges
    assert n_nodes == len(node)
    assert len(set(node[len(seeds):])) == len(node) - len(seeds)
    assert not set(node[len(seeds):]) & set(seeds)


def sample_edges_equal(a: SamplerOutput, b: SamplerOutput) -> bool:
    return (torch.equal(a.node, b.node) and torch.equal(a.row, b.row)
            and torch.equal(a.col, b.col) and torch.equal(a.edge, b.edge)
            and a.num_sampled_nodes == b.num_sampled_nodes
            and a.num_sampled_edges == b.num_sampled_edges)


# ----------------------------------------------------------------------------------
# CSC graph


def test_index_dtype_is_int32_exactly_while_ids_fit():
    from ibp_graph.sampling.graph import index_dtype

    assert index_dtype(0) == index_dtype(111_059_956) == index_dtype(2**31) == np.int32
    assert index_dtype(2**31 + 1) == index_dtype(2**40) == np.int64


def test_int32_and_int64_graphs_sample_the_same():
    """A graph with int64 indices and edge ids (too big for int32) samples exactly like its
    int32 copy, and the sampler's outputs are int64 either way."""
    rng = np.random.default_rng(3)
    ei = random_edge_index(rng, 300, 3000)
    small = CSCGraph.from_edge_index(ei, 300)
    wide = CSCGraph(small.indptr, small.indices.astype(np.int64), small.e_id.astype(np.int64))
    seeds = torch.tensor([5, 17, 250, 3], dtype=torch.int64)
    a = NeighborSampler(small, [4, 3]).sample(seeds, seed=11)
    b = NeighborSampler(wide, [4, 3]).sample(seeds, seed=11)
    assert sample_edges_equal(a, b)
    assert a.node.dtype == a.edge.dtype == a.row.dtype == torch.int64
    with pytest.raises(TypeError, match="indices must be a 1-d numpy array of int32 or int64"):
        CSCGraph(small.indptr, small.indices.astype(np.int16), small.e_id)
    with pytest.raises(TypeError, match="indptr must be a 1-d numpy array of int64"):
        CSCGraph(small.indptr.astype(np.int32), small.indices, small.e_id)


def test_edge_id_dtype_is_32_bit_while_ids_fit_in_32_bits():
    """Edge ids take int32 while they fit, uint32 up to 2**32 (papers100M's 3.2 G undirected edges), then int64."""
    from ibp_graph.sampling.graph import edge_id_dtype

    assert edge_id_dtype(0) == edge_id_dtype(2**31) == np.int32
    assert edge_id_dtype(2**31 + 1) == edge_id_dtype(3_231_371_744) == edge_id_dtype(2**32) == np.uint32
    assert edge_id_dtype(2**32 + 1) == edge_id_dtype(2**40) == np.int64


_OPTIONS = [dict(), dict(subgraph_type="induced"), dict(subgraph_type="bidirectional"), dict(replace=True),
            dict(disjoint=True), dict(parallel=True)]


@pytest.mark.parametrize("options", _OPTIONS + [dict(weight="w"), dict(edge_time="t")], ids=repr)
def test_uint32_edge_ids_sample_like_int32_ones(options):
    """A graph whose e_id is uint32 (edge ids between 2**31 and 2**32) samples exactly like its int32 copy,
    weighted and temporal by edge included (both index edge-order arrays through e_id); outputs are int64."""
    rng = np.random.default_rng(4)
    ei = random_edge_index(rng, 300, 3000)
    small = CSCGraph.from_edge_index(ei, 300)
    wide = CSCGraph(small.indptr, small.indices, small.e_id.astype(np.uint32), small.num_edge_ids)
    given = {k: {"w": rng.random(3000), "t": rng.integers(0, 50, 3000)}.get(v, v) for k, v in options.items()}
    seeds = torch.tensor([5, 17, 250, 3], dtype=torch.int64)
    time = dict(seed_time=torch.full((4,), 40)) if "edge_time" in given else {}
    a = NeighborSampler(small, [4, 3], **given).sample(seeds, seed=11, **time)
    b = NeighborSampler(wide, [4, 3], **given).sample(seeds, seed=11, **time)
    assert sample_edges_equal(a, b) and b.edge.dtype == torch.int64 and b.edge.numel() > 0


@pytest.mark.parametrize("options", _OPTIONS + [dict(node_time="t")], ids=repr)
def test_uint32_edge_ids_above_2_31_come_out_as_given(options):
    """Edge ids at and above 2**31 in a uint32 e_id reach the output as the same non-negative int64 values (no
    sign wrap), and the graph survives save/load with that dtype."""
    rng = np.random.default_rng(5)
    ei = random_edge_index(rng, 300, 3000)
    small = CSCGraph.from_edge_index(ei, 300)
    high = CSCGraph(small.indptr, small.indices, (small.e_id.astype(np.int64) + 2**31).astype(np.uint32),
                    2**31 + 3000)
    given = {k: rng.integers(0, 50, 300) if v == "t" else v for k, v in options.items()}
    seeds = torch.tensor([5, 17, 250, 3], dtype=torch.int64)
    a = NeighborSampler(small, [4, 3], **given).sample(seeds, seed=11)
    b = NeighborSampler(high, [4, 3], **given).sample(seeds, seed=11)
    assert torch.equal(a.node, b.node) and torch.equal(a.row, b.row) and torch.equal(a.col, b.col)
    assert b.edge.dtype == torch.int64 and b.edge.numel() > 0 and torch.equal(b.edge, a.edge + 2**31)


def test_a_uint32_graph_round_trips_and_its_ids_are_checked(tmp_path):
    ei = random_edge_index(np.random.default_rng(6), 50, 400)
    small = CSCGraph.from_edge_index(ei, 50)
    high = CSCGraph(small.indptr, small.indices, (small.e_id.astype(np.int64) + 2**32 - 400).astype(np.uint32),
                    2**32)
    back = CSCGraph.load(high.save(tmp_path / "g"))
    assert back.e_id.dtype == np.uint32 and back.num_edge_ids == 2**32
    np.testing.assert_array_equal(back.e_id, high.e_id)
    with pytest.raises(ValueError, match=r"e_id must name edges in \[0, num_edge_ids=4294967295\); e_id\[\d+\]=4294967295"):
        CSCGraph(small.indptr, small.indices, high.e_id, 2**32 - 1)
    repeated = high.e_id.copy()
    repeated[1] = repeated[0]
    with pytest.raises(ValueError, match=r"e_id must name every edge once; e_id\[1\]=42949"):
        CSCGraph(small.indptr, small.indices, repeated, 2**32)
    with pytest.raises(TypeError, match="e_id must be a 1-d numpy array of int32 or uint32 or int64, got ndarray uint16"):
        CSCGraph(small.indptr, small.indices, small.e_id.astype(np.uint16))


def _by_destination(rng: np.random.Generator, num_nodes: int, num_edges: int) -> torch.Tensor:
    """random_edge_index's edges in destination order: their CSC positions are their ids (as adj_t's)."""
    ei = random_edge_index(rng, num_nodes, num_edges)
    return ei[:, torch.argsort(ei[1], stable=True)]


@pytest.mark.parametrize("options", _OPTIONS + [dict(weight="w"), dict(edge_time="t"), dict(node_time="n"),
                                                dict(edge_ids=False)], ids=repr)
def test_positional_edge_ids_sample_like_the_same_ids_held(options):
    """A graph without e_id (None: edge ids are CSC positions, as for adj_t) samples exactly like the same graph
    with those ids held, weighted and temporal ones included (edge-order arrays need no e_id to reorder)."""
    rng = np.random.default_rng(7)
    held = CSCGraph.from_edge_index(_by_destination(rng, 300, 3000), 300)
    np.testing.assert_array_equal(held.e_id, np.arange(3000))  # in destination order: ids are positions
    positional = CSCGraph(held.indptr, held.indices, None)
    assert positional.positional_ids and not held.positional_ids and positional.e_id is None
    given = {k: {"w": rng.random(3000), "t": rng.integers(0, 50, 3000), "n": rng.integers(0, 50, 300)}.get(v, v)
             for k, v in options.items()}
    seeds = torch.tensor([5, 17, 250, 3], dtype=torch.int64)
    time = dict(seed_time=torch.full((4,), 40)) if "edge_time" in given else {}
    a = NeighborSampler(held, [4, 3], **given).sample(seeds, seed=11, **time)
    b = NeighborSampler(positional, [4, 3], **given).sample(seeds, seed=11, **time)
    assert torch.equal(a.node, b.node) and torch.equal(a.row, b.row) and torch.equal(a.col, b.col)
    if options.get("edge_ids") is False:
        assert a.edge is None and b.edge is None
    else:
        assert torch.equal(a.edge, b.edge) and b.edge.dtype == torch.int64 and b.edge.numel() > 0
    assert positional.e_id is None  # temporal sorting made a new graph; this one still holds no ids


def test_positional_edge_ids_are_made_once_on_request_saved_and_sorted_by_time(tmp_path):
    """checked_e_id() of a positional graph is 0..E-1 in edge_id_dtype, made once; save writes it (load reads an
    ordinary graph); sorted_by_time gives what it gives the graph with those ids held; num_edge_ids below
    num_edges is refused."""
    from ibp_graph.sampling.graph import edge_id_dtype, sorted_by_time

    rng = np.random.default_rng(8)
    held = CSCGraph.from_edge_index(_by_destination(rng, 80, 700), 80)
    positional = CSCGraph(held.indptr, held.indices, None, 700)
    ids = positional.checked_e_id()
    assert ids.dtype == edge_id_dtype(700) and positional.e_id_dtype == ids.dtype
    np.testing.assert_array_equal(ids, np.arange(700))
    assert positional.checked_e_id() is ids and positional.e_id is None
    back = CSCGraph.load(positional.save(tmp_path / "g"))
    assert not back.positional_ids and back.num_edge_ids == 700
    np.testing.assert_array_equal(back.checked_e_id(), np.arange(700))
    key = rng.integers(0, 9, 700)
    a, b = sorted_by_time(held, key), sorted_by_time(CSCGraph(held.indptr, held.indices, None), key)
    assert b.e_id.dtype == a.e_id.dtype
    for name in ("indptr", "indices", "e_id"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    with pytest.raises(ValueError, match="num_edge_ids must be an int >= 700, got 699"):
        CSCGraph(held.indptr, held.indices, None, 699)


def test_csc_matches_brute_force():
    rng = np.random.default_rng(0)
    ei = random_edge_index(rng, 50, 400)
    g = CSCGraph.from_edge_index(ei.to(torch.int32), 50)
    assert (g.num_nodes, g.num_edges) == (50, 400)
    assert g.indptr.dtype == np.int64 and g.indices.dtype == g.e_id.dtype == np.int32  # ids fit
    for v, eids in enumerate(in_edges(ei, 50)):
        sl = slice(g.indptr[v], g.indptr[v + 1])
        assert g.e_id[sl].tolist() == eids
        assert g.indices[sl].tolist() == ei[0, eids].tolist()
    assert g.in_degree().tolist() == [len(x) for x in in_edges(ei, 50)]


def test_csc_empty_graph():
    g = CSCGraph.from_edge_index(torch.empty(2, 0, dtype=torch.int64), 3)
    assert (g.num_nodes, g.num_edges) == (3, 0)
    assert g.indptr.tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("mmap", [True, False])
def test_save_load_round_trip(tmp_path, mmap):
    rng = np.random.default_rng(1)
    ei = random_edge_index(rng, 200, 2000)
    g = CSCGraph.from_edge_index(ei, 200)
    g.save(tmp_path / "g")
    h = CSCGraph.load(tmp_path / "g", mmap=mmap)
    for name in ("indptr", "indices", "e_id"):
        arr = getattr(h, name)
        assert isinstance(arr, np.memmap) == mmap
        np.testing.assert_array_equal(arr, getattr(g, name))
    seeds = torch.arange(0, 200, 7)
    a = NeighborSampler(g, [4, 3]).sample(seeds, seed=5)
    b = NeighborSampler(h, [4, 3]).sample(seeds, seed=5)
    assert sample_edges_equal(a, b)


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="meta.json"):
        CSCGraph.load(tmp_path)
    g = CSCGraph.from_edge_index(torch.tensor([[0, 1], [1, 2]]), 3)
    g.save(tmp_path)
    np.save(tmp_path / "e_id.npy", np.zeros(5, dtype=np.int64))
    with pytest.raises(ValueError, match="e_id"):
        CSCGraph.load(tmp_path)


@pytest.mark.parametrize("edge_index, num_nodes, exc, pattern", [
    (torch.tensor([[0, 1, 2]]), 3, ValueError, r"edge_index.*shape \(2, num_edges\).*\(1, 3\)"),
    (torch.zeros(3, 2, dtype=torch.int64), 3, ValueError, r"edge_index.*\(3, 2\)"),
    (torch.zeros(2, 2), 3, TypeError, r"edge_index.*integer.*float32"),
    (torch.tensor([[0, 7], [1, 2]]), 5, ValueError, r"edge_index.*7.*\[0, 5\)"),
    (torch.tensor([[0, 1], [-3, 2]]), 5, ValueError, r"edge_index.*-3.*\[0, 5\)"),
    (torch.tensor([[0], [0]]), -1, ValueError, r"num_nodes.*>= 0.*-1"),
    (torch.tensor([[0], [0]]), 2.0, TypeError, r"num_nodes"),
    ([[0], [0]], 2, TypeError, r"edge_index.*list"),
])
def test_graph_errors(edge_index, num_nodes, exc, pattern):
    with pytest.raises(exc, match=pattern):
        CSCGraph.from_edge_index(edge_index, num_nodes)


# ----------------------------------------------------------------------------------
# Sampling semantics


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_nodes=st.integers(1, 25),
    num_edges=st.integers(0, 150),
    graph_seed=st.integers(0, 2**32 - 1),
    seed_picks=st.lists(st.integers(0, 10**6), min_size=0, max_size=12),
    num_neighbors=st.lists(st.integers(-1, 6), min_size=1, max_size=3),
    replace=st.booleans(),
    seed=st.integers(-2**63, 2**64 - 1),
)
def test_sample_matches_reference(num_nodes, num_edges, graph_seed, seed_picks,
                                  num_neighbors, replace, seed):
    ei = random_edge_index(np.random.default_rng(graph_seed), num_nodes, num_edges)
    seeds = [p % num_nodes for p in seed_picks]         # duplicates allowed
    g = CSCGraph.from_edge_index(ei, num_nodes)
    out = NeighborSampler(g, num_neighbors, replace=replace).sample(
        torch.tensor(seeds, dtype=torch.int64), seed=seed)
    check_output(out, ei, num_nodes, seeds, num_neighbors, replace)


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("k", [5, 40, 150])
def test_high_degree_paths(k, replace):
    """k above the linear-scan limit (hash-set Floyd) and k close to the degree."""
    rng = np.random.default_rng(k)
    ei = random_edge_index(rng, 300, 30000)
    g = CSCGraph.from_edge_index(ei, 300)
    seeds = rng.integers(0, 300, 64).tolist()
    out = NeighborSampler(g, [k, 3], replace=replace).sample(torch.tensor(seeds), seed=11)
    check_output(out, ei, 300, seeds, [k, 3], replace)


def test_one_seed_reaches_most_of_the_graph():
    """Thousands of nodes discovered from one seed (the id table grows many times)."""
    rng = np.random.default_rng(4)
    ei = random_edge_index(rng, 3000, 15000)
    g = CSCGraph.from_edge_index(ei, 3000)
    out = NeighborSampler(g, [-1, -1, 8, -1]).sample(torch.tensor([int(ei[1, 0])]), seed=1)
    assert out.node.numel() > 1000
    check_output(out, ei, 3000, [int(ei[1, 0])], [-1, -1, 8, -1], False)


def test_all_neighbours_node_set_matches_pyg_k_hop_subgraph():
    """Independent check against PyG: with -1 everywhere, nodes = k-hop in-neighbourhood."""
    pyg_utils = pytest.importorskip("torch_geometric.utils")
    rng = np.random.default_rng(5)
    ei = random_edge_index(rng, 400, 1200)
    seeds = torch.from_numpy(rng.choice(400, 6, replace=False))
    out = NeighborSampler(CSCGraph.from_edge_index(ei, 400), [-1, -1, -1]).sample(
        seeds, seed=0)
    subset, _, _, _ = pyg_utils.k_hop_subgraph(seeds, 3, ei, num_nodes=400,
                                               flow="source_to_target")
    assert set(out.node.tolist()) == set(subset.tolist())
    # Every in-edge of every node closer than 3 hops, each exactly once.
    x = torch.arange(400) * 10                           # features that name their node
    assert torch.equal(x[out.node][:len(seeds)], seeds * 10)
    dst_within = out.node[: sum(out.num_sampled_nodes[:3])]
    expected = torch.isin(ei[1], dst_within).nonzero().flatten()
    assert sorted(out.edge.tolist()) == expected.tolist()


def test_minus_one_takes_all_in_neighbours():
    ei = torch.tensor([[1, 2, 3, 0, 4, 4], [0, 0, 0, 1, 1, 0]])
    g = CSCGraph.from_edge_index(ei, 5)
    out = NeighborSampler(g, [-1, -1]).sample(torch.tensor([0]), seed=0)
    assert out.edge.tolist() == [0, 1, 2, 5, 3, 4]
    assert out.node.tolist() == [0, 1, 2, 3, 4]
    assert out.row.tolist() == [1, 2, 3, 4, 0, 4]
    assert out.col.tolist() == [0, 0, 0, 0, 1, 1]
    assert out.num_sampled_nodes == [1, 4, 0]
    assert out.num_sampled_edges == [4, 2]


def test_duplicate_seeds_kept_and_sampled_separately():
    """Like pyg-lib: node[:n] == seeds; each copy is a frontier position of its own."""
    ei = torch.stack([torch.arange(1, 21), torch.zeros(20, dtype=torch.int64)])
    g = CSCGraph.from_edge_index(ei, 21)
    out = NeighborSampler(g, [3]).sample(torch.tensor([0, 5, 0]), seed=2)
    check_output(out, ei, 21, [0, 5, 0], [3], False)
    assert out.node[:3].tolist() == [0, 5, 0]
    assert out.col.tolist() == [0, 0, 0, 2, 2, 2]         # node 5 has no in-edges
    # A sampled neighbour equal to a seed maps to that seed's position.
    assert (out.row[out.edge == 4] == 1).all()


def test_empty_seeds_and_zero_fanout():
    ei = torch.tensor([[1, 2], [0, 0]])
    g = CSCGraph.from_edge_index(ei, 3)
    out = NeighborSampler(g, [2, 2]).sample(torch.empty(0, dtype=torch.int64), seed=0)
    assert out.node.numel() == out.row.numel() == 0
    assert out.num_sampled_nodes == [0, 0, 0] and out.num_sampled_edges == [0, 0]
    out = NeighborSampler(g, [0, 2]).sample(torch.tensor([0]), seed=0)
    assert out.node.tolist() == [0] and out.num_sampled_edges == [0, 0]
    out = NeighborSampler(g, []).sample(torch.tensor([2, 0, 2]), seed=0)  # no hop (PyG's []): the seeds alone
    assert out.node.tolist() == [2, 0, 2] and out.row.numel() == out.edge.numel() == 0
    assert out.num_sampled_nodes == [3] and out.num_sampled_edges == []


# ----------------------------------------------------------------------------------
# Determinism and randomness


def _medium_graph():
    rng = np.random.default_rng(3)
    ei = random_edge_index(rng, 3000, 60000)
    return CSCGraph.from_edge_index(ei, 3000), torch.from_numpy(rng.integers(0, 3000, 500))


@pytest.mark.parametrize("replace", [False, True])
def test_deterministic_under_seed(replace):
    g, seeds = _medium_graph()
    s = NeighborSampler(g, [10, 5, 40], replace=replace)
    a, b = s.sample(seeds, seed=42), s.sample(seeds, seed=42)
    assert sample_edges_equal(a, b)
    c = s.sample(seeds, seed=43)
    assert not torch.equal(a.edge, c.edge)


def test_independent_of_thread_count():
    g, seeds = _medium_graph()
    s = NeighborSampler(g, [10, 5, 40])
    before = numba.get_num_threads()
    outs = []
    try:
        for n in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS),
                         numba.config.NUMBA_NUM_THREADS}):
            numba.set_num_threads(n)
            outs.append(s.sample(seeds, seed=7))
    finally:
        numba.set_num_threads(before)
    assert len(outs) >= 2 or numba.config.NUMBA_NUM_THREADS == 1
    outs.append(NeighborSampler(g, [10, 5, 40], parallel=False).sample(seeds, seed=7))
    for o in outs[1:]:
        assert sample_edges_equal(outs[0], o)


def _sample_in_child(queue, graph, seeds):
    out = NeighborSampler(graph, [10, 5], parallel=False).sample(seeds, seed=3)
    queue.put(out.edge.tolist())


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork")
def test_serial_sampler_works_in_forked_child():
    """parallel=False is safe in a forked DataLoader worker after parallel use here."""
    g, seeds = _medium_graph()
    parent = NeighborSampler(g, [10, 5]).sample(seeds, seed=3)   # parallel, pool started
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_sample_in_child, args=(queue, g, seeds))
    proc.start()
    try:
        child_edges = queue.get(timeout=60)
    finally:
        proc.join(60)
    assert proc.exitcode == 0
    assert child_edges == parent.edge.tolist()


def chi_square(counts: list[int], expected: float) -> float:
    return sum((c - expected) ** 2 / expected for c in counts)


# Upper tail of the chi-square distribution at p = 1e-6 (computed once with mpmath;
# scipy is not a dependency): a fair sampler fails once in a million runs, a biased one every time.
CHI2_1E6 = {19: 63.7, 99: 180.8}


@pytest.mark.parametrize("degree, k, replace", [(20, 5, False), (20, 5, True),
                                                (100, 40, False)])
def test_uniform_over_in_neighbours(degree, k, replace):
    """Star: node 0 has `degree` in-neighbours; each copy of seed 0 draws k of them."""
    ei = torch.stack([torch.arange(1, degree + 1),
                      torch.zeros(degree, dtype=torch.int64)])
    g = CSCGraph.from_edge_index(ei, degree + 1)
    copies = 4000
    out = NeighborSampler(g, [k], replace=replace).sample(
        torch.zeros(copies, dtype=torch.int64), seed=123)
    assert out.edge.numel() == copies * k
    hits = Counter(out.edge.tolist())
    stat = chi_square([hits.get(e, 0) for e in range(degree)], copies * k / degree)
    assert stat < CHI2_1E6[degree - 1], stat
    # Copies of the same seed draw independently: distinct draws (as sorted tuples)
    # against their expected number.
    distinct = len({tuple(r) for r in out.edge.view(copies, k).tolist()})
    expected = expected_distinct_draws(degree, k, replace, copies)
    assert distinct > 0.95 * expected, (distinct, expected)


def expected_distinct_draws(n: int, k: int, replace: bool, copies: int) -> float:
    """Expected number of distinct k-draws among `copies` independent uniform draws."""
    if not replace:
        space = math.comb(n, k)
        return space * (1 - (1 - 1 / space) ** copies)
    total = 0.0
    for multiset in itertools.combinations_with_replacement(range(n), k):
        ways = math.factorial(k)
        for c in Counter(multiset).values():
            ways //= math.factorial(c)
        total += 1 - (1 - ways / n ** k) ** copies
    return total


# ----------------------------------------------------------------------------------
# Weighted sampling (PyG's weight_attr), subgraph types, disjoint trees


def _weighted_star(weights):
    """Node 0 has in-edges 0..d-1 from nodes 1..d, with these weights."""
    d = len(weights)
    ei = torch.stack([torch.arange(1, d + 1), torch.zeros(d, dtype=torch.int64)])
    return CSCGraph.from_edge_index(ei, d + 1), torch.tensor(weights, dtype=torch.float64)


def test_weighted_with_replacement_draws_proportionally_to_weight():
    graph, w = _weighted_star([1.0, 2.0, 0.0, 3.0, 4.0, 0.0, 10.0])
    copies, k = 4000, 3
    out = NeighborSampler(graph, [k], replace=True, weight=w).sample(torch.zeros(copies, dtype=torch.int64), seed=5)
    hits = Counter(out.edge.tolist())
    assert hits[2] == hits[5] == 0  # zero weight: never drawn
    positive = [e for e in range(7) if w[e] > 0]
    stat = sum((hits[e] - copies * k * w[e].item() / 20.0) ** 2 / (copies * k * w[e].item() / 20.0)
               for e in positive)
    assert stat < 31.0, stat  # chi-square, 4 degrees of freedom, p = 1e-6


def test_weighted_without_replacement_favours_heavy_edges_and_skips_zero_weights():
    graph, w = _weighted_star([1.0, 1.0, 0.0, 1.0, 8.0, 0.0, 8.0, 1.0])
    copies = 4000
    out = NeighborSampler(graph, [2], weight=w).sample(torch.zeros(copies, dtype=torch.int64), seed=9)
    pairs = out.edge.view(copies, 2)
    assert bool((pairs[:, 0] != pairs[:, 1]).all())  # without replacement
    hits = Counter(out.edge.tolist())
    assert hits[2] == hits[5] == 0
    # Efraimidis-Spirakis: P(both heavy edges) = 8/20 * 8/12 + 8/20 * 8/12 = 0.533...
    both = int(((pairs == 4).any(1) & (pairs == 6).any(1)).sum())
    assert abs(both / copies - 16 / 30) < 0.04, both / copies
    assert hits[0] + hits[1] + hits[3] + hits[7] > 0  # light edges are still drawn sometimes


def test_weighted_counts_follow_pyg_s_rules():
    graph, w = _weighted_star([0.0, 1.0, 0.0, 2.0, 0.0])
    s = lambda k, **kw: NeighborSampler(graph, [k], weight=w, **kw).sample(torch.tensor([0]), seed=1)
    assert sorted(s(2).edge.tolist()) == [1, 3]      # fewer positive edges than k: those only
    assert sorted(s(3).edge.tolist()) == [1, 3]
    assert sorted(s(5).edge.tolist()) == [0, 1, 2, 3, 4]  # k >= degree: the whole neighbourhood
    assert sorted(s(-1).edge.tolist()) == [0, 1, 2, 3, 4]
    assert s(4, replace=True).edge.numel() == 4 and set(s(4, replace=True).edge.tolist()) <= {1, 3}
    none, _ = _weighted_star([0.0, 0.0])
    assert NeighborSampler(none, [1], weight=torch.zeros(2)).sample(torch.tensor([0]), seed=1).edge.numel() == 0


def test_weighted_sampling_is_deterministic_and_thread_count_free():
    ei = random_edge_index(np.random.default_rng(4), 300, 5000)
    graph = CSCGraph.from_edge_index(ei, 300)
    w = torch.rand(5000, generator=torch.Generator().manual_seed(0))
    w[::4] = 0
    seeds = torch.arange(0, 300, 3)
    runs = [NeighborSampler(graph, [5, 3], weight=w, parallel=p).sample(seeds, seed=77) for p in (True, False, True)]
    for out in runs[1:]:
        assert sample_edges_equal(out, runs[0]) and torch.equal(out.node, runs[0].node)
    other = NeighborSampler(graph, [5, 3], weight=w).sample(seeds, seed=78)
    assert not torch.equal(other.edge, runs[0].edge)


@pytest.mark.parametrize("weight, pattern", [
    (torch.ones(3), r"weight has shape \(3,\); accepted: one weight per edge, shape \(4,\)"),
    (torch.tensor([1.0, float("nan"), 1.0, 1.0]), r"weight\[1\]=nan; accepted: finite weights >= 0"),
    (torch.ones(4, dtype=torch.bool), "weight has dtype bool; accepted: a real"),
])
def test_weight_errors(weight, pattern):
    graph = CSCGraph.from_edge_index(torch.tensor([[1, 2, 3, 0], [0, 0, 1, 2]]), 4)
    with pytest.raises((ValueError, TypeError), match=pattern):
        NeighborSampler(graph, [2], weight=weight)


def _path_graph():
    """0 <- 1 <- 2 <- 3, plus 2 -> 0 and 0 -> 2 (a 2-cycle with 0)."""
    ei = torch.tensor([[1, 2, 3, 2, 0], [0, 1, 2, 0, 2]])
    return CSCGraph.from_edge_index(ei, 4), ei


def test_bidirectional_adds_reverse_edges_sorted_by_destination():
    graph, ei = _path_graph()
    out = NeighborSampler(graph, [-1], subgraph_type="bidirectional").sample(torch.tensor([0]), seed=0)
    # directional: node [0, 1, 2], edges 1->0 (e0), 2->0 (e3); plus reversals 0->1, 0->2
    assert out.node.tolist() == [0, 1, 2]
    assert list(zip(out.row.tolist(), out.col.tolist(), out.edge.tolist())) == [
        (1, 0, 0), (2, 0, 3), (0, 1, 0), (0, 2, 3)]
    assert out.num_sampled_nodes is None and out.num_sampled_edges is None


def test_bidirectional_keeps_one_copy_of_an_edge_sampled_both_ways():
    graph, ei = _path_graph()
    out = NeighborSampler(graph, [-1, -1], subgraph_type="bidirectional").sample(torch.tensor([0]), seed=0)
    pairs = list(zip(out.row.tolist(), out.col.tolist()))
    assert len(pairs) == len(set(pairs))
    assert set(pairs) == {(a, b) for a, b in pairs} | {(b, a) for a, b in pairs}  # symmetric


def test_induced_takes_every_edge_among_the_sampled_nodes():
    graph, ei = _path_graph()
    directional = NeighborSampler(graph, [1], replace=False).sample(torch.tensor([1]), seed=3)
    out = NeighborSampler(graph, [1], subgraph_type="induced").sample(torch.tensor([1]), seed=3)
    assert out.node.tolist() == directional.node.tolist() == [1, 2]
    assert list(zip(out.row.tolist(), out.col.tolist(), out.edge.tolist())) == [(1, 0, 1)]
    out = NeighborSampler(graph, [-1, -1], subgraph_type="induced").sample(torch.tensor([0, 0]), seed=0)
    assert out.node.tolist() == [0, 0, 1, 2, 3]
    # every edge between {0, 1, 2, 3}, destination by destination; the seed's second copy gets none
    assert list(zip(out.row.tolist(), out.col.tolist(), out.edge.tolist())) == [
        (2, 0, 0), (3, 0, 3), (3, 2, 1), (4, 3, 2), (0, 3, 4)]


def test_disjoint_trees_repeat_shared_nodes():
    graph, ei = _path_graph()
    out = NeighborSampler(graph, [-1, -1], disjoint=True).sample(torch.tensor([0, 1]), seed=0)
    # tree 0 (seed 0): 0 <- 1, 2; 2 <- 3. Tree 1 (seed 1): 1 <- 2; 2 <- 3, 0 (0 again, in tree 1)
    assert out.node.tolist() == [0, 1, 1, 2, 2, 3, 3, 0]
    assert out.batch.tolist() == [0, 1, 0, 0, 1, 0, 1, 1]
    assert out.num_sampled_nodes == [2, 3, 3]
    assert bool((out.batch[out.row] == out.batch[out.col]).all())
    plain = NeighborSampler(graph, [-1, -1]).sample(torch.tensor([0, 1]), seed=0)
    assert plain.batch is None and plain.node.tolist() == [0, 1, 2, 3]


def _timed_star():
    """Node 0 has in-edges 0..5 from nodes 1..6; node times below, node 0 at time 4."""
    ei = torch.tensor([[1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 0, 0]])
    return CSCGraph.from_edge_index(ei, 7), torch.tensor([4, 6, 1, 5, 2, 3, 9])


def test_temporal_uniform_draws_only_neighbours_no_later_than_the_seed():
    graph, t = _timed_star()
    s = NeighborSampler(graph, [2], node_time=t)
    assert s.disjoint and s.temporal
    drawn = Counter()
    for seed in range(300):
        out = s.sample(torch.tensor([0]), seed=seed)
        assert out.node.numel() == 3 and bool((t[out.node] <= 4).all())
        drawn.update(out.node[1:].tolist())
    assert set(drawn) == {2, 4, 5}  # times 1, 2, 3; nodes 1, 3, 6 are later than 4
    assert min(drawn.values()) > 150  # uniform among the three: each in 2/3 of the draws


def test_temporal_last_takes_the_latest_allowed_and_seed_time_overrides():
    graph, t = _timed_star()
    s = NeighborSampler(graph, [2], node_time=t, temporal_strategy="last")
    assert s.sample(torch.tensor([0]), seed=1).node.tolist() == [0, 4, 5]  # times 2 and 3
    assert s.sample(torch.tensor([0]), seed=1, seed_time=torch.tensor([5])).node.tolist() == [0, 5, 3]
    assert s.sample(torch.tensor([0]), seed=1, seed_time=torch.tensor([0])).node.tolist() == [0]


def test_temporal_last_with_replacement_draws_among_the_latest_allowed():
    """As pyg-lib (and the heterogeneous front-end): with replace=True, "last" makes k draws among the
    latest k allowed in-edges (repeats possible), not the latest k themselves."""
    graph, t = _timed_star()
    s = NeighborSampler(graph, [2], node_time=t, temporal_strategy="last", replace=True)
    pairs = Counter()
    for seed in range(200):
        out = s.sample(torch.tensor([0]), seed=seed)
        sources = out.node[out.row].tolist()
        assert len(sources) == 2 and set(sources) <= {4, 5}  # times 2 and 3, the latest two no later than 4
        pairs[tuple(sorted(sources))] += 1
    assert set(pairs) == {(4, 4), (4, 5), (5, 5)}  # independent draws: 1/4, 1/2, 1/4
    assert min(pairs.values()) > 20


def test_temporal_by_edge_time_needs_seed_times():
    graph, _ = _timed_star()
    s = NeighborSampler(graph, [-1], edge_time=torch.tensor([5, 1, 2, 3, 9, 0]))
    out = s.sample(torch.tensor([0]), seed=0, seed_time=torch.tensor([2]))
    assert out.edge.tolist() == [5, 1, 2]  # edge times 0, 1, 2, in time order
    with pytest.raises(ValueError, match="edge-level temporal sampling needs seed_time"):
        s.sample(torch.tensor([0]), seed=0)
    with pytest.raises(ValueError, match="seed_time is given but the sampler has no node_time or edge_time"):
        NeighborSampler(graph, [1]).sample(torch.tensor([0]), seed=0, seed_time=torch.tensor([1]))
    with pytest.raises(ValueError, match=r"node_time has shape \(3,\); accepted: shape \(7,\)"):
        NeighborSampler(graph, [1], node_time=torch.zeros(3))
    with pytest.raises(ValueError, match="temporal_strategy='recent' is not accepted"):
        NeighborSampler(graph, [1], node_time=torch.zeros(7), temporal_strategy="recent")


def test_subgraph_type_and_disjoint_errors():
    graph, _ = _path_graph()
    with pytest.raises(ValueError, match=r"subgraph_type='both' is not accepted; use one of"):
        NeighborSampler(graph, [1], subgraph_type="both")
    with pytest.raises(ValueError, match="disjoint=True with subgraph_type='induced' is not accepted"):
        NeighborSampler(graph, [1], subgraph_type="induced", disjoint=True)
    with pytest.raises(TypeError, match="disjoint must be a bool, got 1"):
        NeighborSampler(graph, [1], disjoint=1)


# ----------------------------------------------------------------------------------
# Errors


@pytest.fixture(scope="module")
def small_sampler():
    g = CSCGraph.from_edge_index(torch.tensor([[1, 2], [0, 0]]), 4)
    return NeighborSampler(g, [2])


@pytest.mark.parametrize("seeds, exc, pattern", [
    (torch.tensor([0.0, 1.0]), TypeError, r"seeds.*integer.*float32"),
    (torch.tensor([True]), TypeError, r"seeds.*integer.*bool"),
    (torch.tensor([[0, 1]]), ValueError, r"seeds.*1-d.*\(1, 2\)"),
    (torch.tensor([0, 4]), ValueError, r"seeds.*\b4\b.*\[0, 4\)"),
    (torch.tensor([-1, 2]), ValueError, r"seeds.*-1.*\[0, 4\)"),
    ([0, 1], TypeError, r"seeds.*list"),
])
def test_seed_errors(small_sampler, seeds, exc, pattern):
    with pytest.raises(exc, match=pattern):
        small_sampler.sample(seeds, seed=0)


@pytest.mark.parametrize("bad_seed", [None, 1.5, True, "1"])
def test_rng_seed_errors(small_sampler, bad_seed):
    with pytest.raises(TypeError, match="seed must be an int"):
        small_sampler.sample(torch.tensor([0]), seed=bad_seed)


@pytest.mark.parametrize("num_neighbors, pattern", [
    (5, r"num_neighbors.*list.*5"),
    ([3, -2], r"num_neighbors\[1\].*>= -1.*-2"),
    ([2.5], r"num_neighbors\[0\].*2\.5"),
    ([True], r"num_neighbors\[0\].*True"),
])
def test_num_neighbors_errors(num_neighbors, pattern):
    g = CSCGraph.from_edge_index(torch.tensor([[1], [0]]), 2)
    with pytest.raises(ValueError, match=pattern):
        NeighborSampler(g, num_neighbors)


def test_flag_type_errors():
    g = CSCGraph.from_edge_index(torch.tensor([[1], [0]]), 2)
    with pytest.raises(TypeError, match="replace must be a bool.*1"):
        NeighborSampler(g, [1], replace=1)
    with pytest.raises(TypeError, match="parallel must be None or a bool.*'yes'"):
        NeighborSampler(g, [1], parallel="yes")


def test_graph_type_error():
    with pytest.raises(TypeError, match="graph must be a CSCGraph.*Tensor"):
        NeighborSampler(torch.zeros(2, 2), [1])


# ----------------------------------------------------------------------------------
# Issue 19: fan-outs far above any in-degree, and fan-outs whose edges cannot fit in memory.

HUGE = 2 ** 40  # without replacement: clamped by every in-degree; with it: 8 TiB of edges per seed


def huge_fanout_graph():
    rng = np.random.default_rng(0)
    n = 500
    g = CSCGraph.from_edge_index(torch.from_numpy(np.stack([rng.integers(0, n, 5000), rng.integers(0, n, 5000)])), n)
    return g, torch.arange(0, n, 10)


MODES = {
    "uniform": {},
    "disjoint": {"disjoint": True},
    "bidirectional": {"subgraph_type": "bidirectional"},
    "induced": {"subgraph_type": "induced"},
    "temporal": {"node_time": torch.arange(500) % 7},
    "temporal-last": {"node_time": torch.arange(500) % 7, "temporal_strategy": "last"},
}


@pytest.mark.parametrize("mode", MODES)
def test_a_fan_out_far_above_every_in_degree_takes_whole_neighbourhoods(mode):
    g, seeds = huge_fanout_graph()
    full = NeighborSampler(g, [-1, -1], parallel=False, **MODES[mode]).sample(seeds, seed=3)
    big = NeighborSampler(g, [HUGE, 2 ** 62], parallel=False, **MODES[mode]).sample(seeds, seed=3)
    for field in ("node", "row", "col", "edge", "batch"):
        a, b = getattr(full, field), getattr(big, field)
        assert (a is None and b is None) or torch.equal(a, b), field


@pytest.mark.parametrize("mode", ["uniform", "disjoint", "temporal", "weighted"])
def test_a_fan_out_whose_edges_cannot_fit_raises_memory_error_naming_it(mode):
    g, seeds = huge_fanout_graph()
    kw = {"weight": torch.ones(g.num_edges)} if mode == "weighted" else MODES[mode]
    sampler = NeighborSampler(g, [2, HUGE], replace=True, parallel=False, **kw)
    with pytest.raises(MemoryError, match=rf"num_neighbors\[1\]={HUGE} would sample [\d,]+ edges .*: its buffers "
                                          r"take [\d,]+ bytes, more than the [\d,]+ bytes of memory available"):
        sampler.sample(seeds, seed=0)
    small = NeighborSampler(g, [2, 3], replace=True, parallel=False, **kw).sample(seeds, seed=0)
    assert small.num_sampled_edges is None or small.num_sampled_edges[1] > 0  # nothing else changed


@pytest.mark.parametrize("k", [2 ** 63, 10 ** 20, 1e20])
def test_a_fan_out_beyond_int64_is_refused_with_the_accepted_range(k):
    g, _ = huge_fanout_graph()
    with pytest.raises(ValueError, match=r"num_neighbors\[1\] must be an int >= -1 and <= 9223372036854775807 "
                                         r"\(2\*\*63 - 1; -1 = all neighbours\), got " + re.escape(repr(k))):
        NeighborSampler(g, [3, k])


# Both samplers, both kernels, under numba's workqueue layer (which drops an error raised inside a
# parallel task): a clamped huge fan-out samples whole neighbourhoods, an unfittable one raises by name.
WORKQUEUE = """
import numba, numpy as np, torch
from ibp_graph.sampling import CSCGraph, NeighborSampler
from ibp_graph.sampling.hetero import HeteroNeighborSampler, TypedCSC
rng = np.random.default_rng(0)
n = 500
ei = torch.from_numpy(np.stack([rng.integers(0, n, 5000), rng.integers(0, n, 5000)]))
g = CSCGraph.from_edge_index(ei, n)
het = {("v", "to", "v"): TypedCSC.from_edge_index(ei, n, n)}
seeds = torch.arange(0, n, 10)
for parallel in (True, False):
    full = NeighborSampler(g, [-1, -1], parallel=parallel).sample(seeds, seed=0)
    big = NeighborSampler(g, [2**34, 2**34], parallel=parallel).sample(seeds, seed=0)
    assert big.node.min() >= 0 and big.node.max() < n, "ids out of range"
    assert all(torch.equal(getattr(full, f), getattr(big, f)) for f in ("node", "row", "col", "edge"))
    hfull = HeteroNeighborSampler({"v": n}, het, [-1, -1], parallel=parallel).sample("v", seeds, seed=0)
    hbig = HeteroNeighborSampler({"v": n}, het, [2**34, 2**34], parallel=parallel).sample("v", seeds, seed=0)
    assert torch.equal(hfull.node["v"], hbig.node["v"]) and torch.equal(hfull.edge[("v", "to", "v")],
                                                                        hbig.edge[("v", "to", "v")])
    for make in (lambda: NeighborSampler(g, [2**34], parallel=parallel, replace=True).sample(seeds, seed=0),
                 lambda: HeteroNeighborSampler({"v": n}, het, [2**34], parallel=parallel,
                                               replace=True).sample("v", seeds, seed=0)):
        try:
            make()
            print("NO ERROR")
        except MemoryError as e:
            print("MemoryError", e)
print("LAYER", numba.threading_layer())
"""


def test_huge_fan_outs_under_the_workqueue_layer_never_give_garbage_ids(monkeypatch):
    from tests.faults.isolated import expect_clean_exit, run_python

    monkeypatch.setenv("NUMBA_THREADING_LAYER", "workqueue")
    monkeypatch.setenv("NUMBA_NUM_THREADS", "2")
    out = expect_clean_exit(run_python(WORKQUEUE)).splitlines()
    assert out[-1] == "LAYER workqueue"
    assert len(out) == 5 and all(line.startswith("MemoryError num_neighbors[") for line in out[:4]), out
    assert "num_neighbors[0]=17179869184 would sample 858,993,459,200 edges" in out[0]
    assert "num_neighbors[('v', 'to', 'v')][0]=17179869184 would sample" in out[1]
    assert all(" bytes, more than the " in line for line in out[:4])


@pytest.mark.parametrize("options", _OPTIONS + [dict(weight="w"), dict(edge_time="t"), dict(node_time="t")],
                         ids=repr)
def test_without_edge_ids_the_homogeneous_sample_is_the_same_less_its_edge_ids(options):
    rng = np.random.default_rng(8)
    ei = random_edge_index(rng, 300, 3000)
    g = CSCGraph.from_edge_index(ei, 300)
    given = {k: {"w": rng.random(3000), "t": rng.integers(0, 50, 300 if k == "node_time" else 3000)}.get(v, v)
             for k, v in options.items()}
    seeds = torch.tensor([5, 17, 250, 3], dtype=torch.int64)
    time = dict(seed_time=torch.full((4,), 40)) if "edge_time" in given else {}
    a = NeighborSampler(g, [4, 3], **given).sample(seeds, seed=11, **time)
    b = NeighborSampler(g, [4, 3], edge_ids=False, **given).sample(seeds, seed=11, **time)
    assert a.edge.numel() > 0 and b.edge is None
    assert torch.equal(a.node, b.node) and torch.equal(a.row, b.row) and torch.equal(a.col, b.col)
    assert (a.num_sampled_nodes, a.num_sampled_edges) == (b.num_sampled_nodes, b.num_sampled_edges)


_NO_E_ID_READS = r"""
import json, os, sys
import torch
from ibp_graph.sampling import CSCGraph, NeighborSampler
d, edge_ids = sys.argv[1], sys.argv[2] == "1"
s = NeighborSampler(CSCGraph.load(d, mmap=True), [4, 3], edge_ids=edge_ids)
os.truncate(os.path.join(d, "e_id.npy"), 0)  # from here on a read of e_id's pages is SIGBUS
print(json.dumps([s.sample(torch.arange(b, b + 8), seed=b).row.tolist() for b in range(0, 200, 8)]))
"""


def test_without_edge_ids_the_sampler_never_reads_e_id_after_construction(tmp_path):
    """A memory-mapped graph whose e_id.npy is truncated after the sampler was built: sampling without edge ids
    gives the rows it gives from an intact graph (e_id's pages never touched: not kept in memory while
    training); with edge ids the first read of e_id kills the process (SIGBUS), which shows the test bites."""
    ei = random_edge_index(np.random.default_rng(9), 300, 3000)
    g = CSCGraph.from_edge_index(ei, 300)
    want = [NeighborSampler(g, [4, 3]).sample(torch.arange(b, b + 8), seed=b).row.tolist() for b in range(0, 200, 8)]
    runs = {}
    for edge_ids in ("0", "1"):
        d = g.save(tmp_path / f"g{edge_ids}")
        runs[edge_ids] = subprocess.run([sys.executable, "-c", _NO_E_ID_READS, str(d), edge_ids],
                                        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert runs["0"].returncode == 0, runs["0"].stderr
    assert json.loads(runs["0"].stdout) == want
    assert runs["1"].returncode == -signal.SIGBUS, (runs["1"].returncode, runs["1"].stderr[-2000:])
