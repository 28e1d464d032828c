"""Heterogeneous neighbour sampler: exact against a brute-force reference (full fan-out), the
contract of PyG's heterogeneous NeighborLoader (any fan-out), determinism, and its errors."""
from __future__ import annotations

import numba
import numpy as np
import pytest
import torch

from ibp_graph.sampling.hetero import (HeteroNeighborSampler, HeteroSamplerOutput, TypedCSC,
                                       resolve_num_neighbors)

CITES, WRITES, REV, AFF, EMPTY = (("paper", "cites", "paper"), ("author", "writes", "paper"),
                                  ("paper", "rev_writes", "author"), ("author", "aff", "inst"),
                                  ("inst", "empty", "paper"))


def random_hetero(seed=0, papers=60, authors=80, insts=7):
    """Node counts and edge_index per edge type: a small multigraph with skewed in-degrees, a type
    only reachable as a destination (inst) and an edge type without edges."""
    rng = np.random.default_rng(seed)
    num_nodes = {"paper": papers, "author": authors, "inst": insts}

    def edges(src, dst, m):
        w = rng.pareto(1.5, num_nodes[dst]) + 0.05
        d = rng.choice(num_nodes[dst], m, p=w / w.sum())
        s = rng.integers(0, num_nodes[src], m)
        return torch.from_numpy(np.stack([s, d]).astype(np.int64))

    ei = {CITES: edges("paper", "paper", 300), WRITES: edges("author", "paper", 200),
          AFF: edges("author", "inst", 90), EMPTY: torch.zeros(2, 0, dtype=torch.int64)}
    ei[REV] = ei[WRITES].flip(0)
    ei = {e: ei[e] for e in (CITES, WRITES, REV, AFF, EMPTY)}  # the edge types' order
    return num_nodes, ei


def make_sampler(num_nodes, ei, num_neighbors, **kw):
    graphs = {e: TypedCSC.from_edge_index(v, num_nodes[e[0]], num_nodes[e[2]]) for e, v in ei.items()}
    return HeteroNeighborSampler(num_nodes, graphs, num_neighbors, **kw)


def reference_full(num_nodes, ei, input_type, seeds, hops, key=None, seed_t=None, take=None):
    """pyg-lib's algorithm with every in-edge taken, written out plainly. Temporal: with `key` (per
    edge type, each edge's time: its source node's or its own), in-edges are ordered by it (edge
    order among ties) and only those no later than `seed_t` are candidates; `take(e, hop, cand)`
    picks among the candidates (all by default)."""
    key = key or {}
    in_edges = {e: [[] for _ in range(num_nodes[e[2]])] for e in ei}
    for e, v in ei.items():
        for k, d in enumerate(v[1].tolist()):
            in_edges[e][d].append(k)
        if e in key:
            for lst in in_edges[e]:
                lst.sort(key=lambda k: (key[e][k], k))
    nodes = {t: [] for t in num_nodes}
    pos = {t: {} for t in num_nodes}
    for i, s in enumerate(seeds):
        nodes[input_type].append(s)
        pos[input_type].setdefault(s, i)
    rows, cols, eids = ({e: [] for e in ei} for _ in range(3))
    front = {t: (0, len(nodes[t])) for t in num_nodes}
    for hop in range(hops):
        for e, v in ei.items():
            src, _, dst = e
            for i in range(*front[dst]):
                cand = in_edges[e][nodes[dst][i]]
                if e in key:
                    cand = [k for k in cand if key[e][k] <= seed_t]
                for k in (take(e, hop, cand) if take else cand):
                    u = int(v[0, k])
                    if u not in pos[src]:
                        pos[src][u] = len(nodes[src])
                        nodes[src].append(u)
                    rows[e].append(pos[src][u])
                    cols[e].append(i)
                    eids[e].append(k)
        front = {t: (front[t][1], len(nodes[t])) for t in num_nodes}
    return nodes, rows, cols, eids


def check_contract(out: HeteroSamplerOutput, num_nodes, ei, input_type, seeds, fanouts, replace=False):
    """What PyG's heterogeneous NeighborLoader promises, checked for any fan-out."""
    seeds = torch.as_tensor(seeds)
    assert set(out.node) == set(num_nodes) and set(out.row) == set(out.col) == set(out.edge) == set(ei)
    assert torch.equal(out.node[input_type][: seeds.numel()], seeds)  # seeds first, as given
    for t, n in out.num_sampled_nodes.items():
        assert sum(n) == out.node[t].numel()
        assert n[0] == (seeds.numel() if t == input_type else 0)
        rest = out.node[t][n[0]:]
        assert rest.unique().numel() == rest.numel()  # a node is new once
        assert not np.isin(rest.numpy(), out.node[t][: n[0]].numpy()).any()
    for e, v in ei.items():
        src, _, dst = e
        row, col, eid = out.row[e], out.col[e], out.edge[e]
        assert row.dtype == col.dtype == eid.dtype == torch.int64
        assert sum(out.num_sampled_edges[e]) == eid.numel() == row.numel() == col.numel()
        # every edge is real and points from the sampled source to the frontier destination
        assert torch.equal(v[:, eid], torch.stack([out.node[src][row], out.node[dst][col]]))
        deg = torch.bincount(v[1], minlength=num_nodes[dst])
        lo = 0
        for hop, m in enumerate(out.num_sampled_edges[e]):
            r, c, k = row[lo:lo + m], col[lo:lo + m], eid[lo:lo + m]
            lo += m
            nd = out.num_sampled_nodes[dst]
            begin, end = sum(nd[:hop]), sum(nd[:hop + 1])  # the frontier: new at the previous hop
            assert bool(((c >= begin) & (c < end)).all())
            assert bool((r < sum(out.num_sampled_nodes[src][:hop + 2])).all())
            fan = fanouts[e][hop]
            got = torch.bincount(c - begin, minlength=end - begin) if m else torch.zeros(end - begin,
                                                                                          dtype=torch.int64)
            d = deg[out.node[dst][begin:end]]
            want = d if fan < 0 else (torch.where(d > 0, fan, 0) if replace else d.clamp(max=fan))
            assert torch.equal(got, want), (e, hop)
            if not replace:  # distinct in-edges per frontier position
                pairs = torch.stack([c, k]).unique(dim=1)
                assert pairs.shape[1] == m
    # every node new at hop h is the source of an edge sampled at hop h
    for t in num_nodes:
        n = out.num_sampled_nodes[t]
        for hop in range(1, len(n)):
            new = set(range(sum(n[:hop]), sum(n[:hop + 1])))
            reached = set()
            for e in ei:
                if e[0] != t:
                    continue
                lo = sum(out.num_sampled_edges[e][:hop - 1])
                reached |= set(out.row[e][lo:lo + out.num_sampled_edges[e][hop - 1]].tolist())
            assert new <= reached


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_full_fanout_equals_the_reference_exactly(seed):
    num_nodes, ei = random_hetero(seed)
    seeds = [3, 17, 3, 40, 0]  # a repeated seed too
    out = make_sampler(num_nodes, ei, [-1, -1, -1]).sample("paper", torch.tensor(seeds), seed=5)
    nodes, rows, cols, eids = reference_full(num_nodes, ei, "paper", seeds, 3)
    for t in num_nodes:
        assert out.node[t].tolist() == nodes[t]
    for e in ei:
        assert out.row[e].tolist() == rows[e]
        assert out.col[e].tolist() == cols[e]
        assert out.edge[e].tolist() == eids[e]
    check_contract(out, num_nodes, ei, "paper", seeds, {e: [-1] * 3 for e in ei})


@pytest.mark.parametrize("fan", [[2, 1], [5, 3, 2], [0, 4], [40, 40]])
@pytest.mark.parametrize("replace", [False, True])
def test_contract_for_any_fanout(fan, replace):
    num_nodes, ei = random_hetero(3)
    sampler = make_sampler(num_nodes, ei, fan, replace=replace)
    for s in range(4):
        seeds = torch.randint(0, num_nodes["author"], (9,), generator=torch.Generator().manual_seed(s))
        out = sampler.sample("author", seeds, seed=s)
        check_contract(out, num_nodes, ei, "author", seeds, {e: fan for e in ei}, replace=replace)


def test_fanouts_per_edge_type_are_respected():
    num_nodes, ei = random_hetero(4)
    fan = {CITES: [3, 1], WRITES: [1, 2], REV: [2, 0], AFF: [-1, -1], EMPTY: [5, 5]}
    out = make_sampler(num_nodes, ei, fan).sample("paper", torch.arange(10), seed=9)
    check_contract(out, num_nodes, ei, "paper", torch.arange(10), fan)
    assert out.num_sampled_edges[REV][1] == 0 and out.num_sampled_edges[EMPTY] == [0, 0]


def test_unreached_types_are_present_and_empty():
    num_nodes, ei = random_hetero(0)
    out = make_sampler(num_nodes, ei, [3]).sample("paper", torch.tensor([1, 2]), seed=0)
    # one hop from papers reaches papers and authors; institutions are reached from authors only
    assert out.node["inst"].shape == (0,) and out.node["inst"].dtype == torch.int64
    assert out.num_sampled_nodes["inst"] == [0, 0]
    assert out.edge[AFF].numel() == 0 and out.num_sampled_edges[AFF] == [0]
    assert out.edge[EMPTY].numel() == 0 and out.row[EMPTY].dtype == torch.int64


def test_same_seed_same_output_whatever_the_threads():
    num_nodes, ei = random_hetero(5, papers=400, authors=500)
    seeds = torch.arange(0, 400, 2)
    ref = make_sampler(num_nodes, ei, [6, 4], parallel=False).sample("paper", seeds, seed=11)
    threads = numba.get_num_threads()
    try:
        for n in sorted({1, max(1, threads)}):
            numba.set_num_threads(n)
            out = make_sampler(num_nodes, ei, [6, 4], parallel=True).sample("paper", seeds, seed=11)
            for t in num_nodes:
                assert torch.equal(out.node[t], ref.node[t])
            for e in ei:
                assert torch.equal(out.edge[e], ref.edge[e]) and torch.equal(out.row[e], ref.row[e])
    finally:
        numba.set_num_threads(threads)
    other = make_sampler(num_nodes, ei, [6, 4]).sample("paper", seeds, seed=12)
    assert not torch.equal(other.edge[CITES], ref.edge[CITES])


def test_edge_types_draw_independent_streams():
    # two identical edge types must not sample the same neighbours (the type is in the key)
    num_nodes, ei = random_hetero(6)
    twin = {CITES: ei[CITES], ("paper", "cites_again", "paper"): ei[CITES]}
    out = make_sampler(num_nodes, twin, [2]).sample("paper", torch.arange(60), seed=1)
    assert not torch.equal(out.edge[CITES], out.edge[("paper", "cites_again", "paper")])


def test_num_neighbors_dict_and_list_agree_and_are_checked():
    edge_types = [CITES, WRITES]
    assert resolve_num_neighbors([3, 2], edge_types) == {CITES: [3, 2], WRITES: [3, 2]}
    assert resolve_num_neighbors({CITES: [3, 2], "author__writes__paper": [1, 1]}, edge_types) == \
        {CITES: [3, 2], WRITES: [1, 1]}
    assert resolve_num_neighbors({CITES: [4]}, edge_types, default=[1]) == {CITES: [4], WRITES: [1]}
    with pytest.raises(ValueError, match="no fan-outs for edge type \\('author', 'writes', 'paper'\\)"):
        resolve_num_neighbors({CITES: [3, 2]}, edge_types)
    with pytest.raises(ValueError, match="names edge type \\('a', 'b', 'c'\\), which the graph does not have"):
        resolve_num_neighbors({CITES: [1], WRITES: [1], ("a", "b", "c"): [1]}, edge_types)
    with pytest.raises(ValueError, match="hops must be the same across all edge types"):
        resolve_num_neighbors({CITES: [1], WRITES: [1, 1]}, edge_types)
    with pytest.raises(ValueError, match="num_neighbors\\[1\\] must be an int >= -1"):
        resolve_num_neighbors([3, -2], edge_types)
    with pytest.raises(ValueError, match="default=\\[1\\] with a list"):
        resolve_num_neighbors([3], edge_types, default=[1])
    num_nodes, ei = random_hetero(0)
    a = make_sampler(num_nodes, ei, [3, 2]).sample("paper", torch.arange(5), seed=2)
    b = make_sampler(num_nodes, ei, {e: [3, 2] for e in ei}).sample("paper", torch.arange(5), seed=2)
    assert all(torch.equal(a.edge[e], b.edge[e]) for e in ei)


def test_errors_name_the_argument_and_value():
    num_nodes, ei = random_hetero(0)
    sampler = make_sampler(num_nodes, ei, [2])
    with pytest.raises(ValueError, match="input_type='venue' is not a node type"):
        sampler.sample("venue", torch.arange(2), seed=0)
    with pytest.raises(ValueError, match="'inst' node id 7, outside the valid range \\[0, 7\\)"):
        sampler.sample("inst", torch.tensor([0, 7]), seed=0)
    with pytest.raises(TypeError, match="integer dtype"):
        sampler.sample("paper", torch.tensor([0.0]), seed=0)
    with pytest.raises(TypeError, match="seed must be an int"):
        sampler.sample("paper", torch.tensor([0]), seed="1")
    with pytest.raises(ValueError, match="edge_index\\[0\\] contains source node id 80"):
        TypedCSC.from_edge_index(torch.tensor([[80], [0]]), 80, 60)
    with pytest.raises(ValueError, match="edge_index\\[1\\] contains destination node id -1"):
        TypedCSC.from_edge_index(torch.tensor([[0], [-1]]), 80, 60)
    graphs = {CITES: TypedCSC.from_edge_index(ei[CITES], 60, 60)}
    with pytest.raises(ValueError, match="names node type 'paper', which num_nodes lacks"):
        HeteroNeighborSampler({"author": 80}, graphs, [1])
    with pytest.raises(ValueError, match="joins 60 source and 60 destination nodes"):
        HeteroNeighborSampler({"paper": 61}, graphs, [1])


def test_typed_csc_keeps_sources_of_another_type():
    ei = torch.tensor([[9, 0, 9, 4], [1, 0, 1, 0]])  # 10 sources, 2 destinations
    g = TypedCSC.from_edge_index(ei, num_src=10, num_dst=2)
    assert (g.num_src, g.num_dst, g.num_edges) == (10, 2, 4)
    assert g.indptr.tolist() == [0, 2, 4]
    assert g.indices.tolist() == [0, 4, 9, 9] and g.e_id.tolist() == [1, 3, 0, 2]
    assert repr(g) == "TypedCSC(num_src=10, num_dst=2, num_edges=4)"


def test_induced_subgraph_is_every_edge_between_the_sampled_nodes():
    num_nodes, ei = random_hetero(7)
    seeds = torch.tensor([4, 9, 4, 30])
    directional = make_sampler(num_nodes, ei, [3, 2]).sample("paper", seeds, seed=3)
    out = make_sampler(num_nodes, ei, [3, 2], induced=True).sample("paper", seeds, seed=3)
    assert out.num_sampled_nodes is None and out.num_sampled_edges is None
    for t in num_nodes:
        assert torch.equal(out.node[t], directional.node[t])  # the same nodes
    for e, v in ei.items():
        src, _, dst = e
        first = {}
        for i, u in enumerate(out.node[src].tolist()):
            first.setdefault(u, i)
        want = [(first[int(v[0, k])], i, k) for i, d in enumerate(out.node[dst].tolist())
                for k in range(v.shape[1]) if int(v[1, k]) == d and int(v[0, k]) in first]
        got = list(zip(out.row[e].tolist(), out.col[e].tolist(), out.edge[e].tolist()))
        assert got == want
    assert out.edge[CITES].numel() > directional.edge[CITES].numel()


def per_seed(out, num_nodes, ei, b):
    """The part of a disjoint output grown from seed b, with positions local to that part."""
    keep = {t: (out.batch[t] == b).nonzero().view(-1) for t in num_nodes}
    local = {}
    for t, idx in keep.items():
        m = torch.full((out.node[t].numel(),), -1, dtype=torch.int64)
        m[idx] = torch.arange(idx.numel())
        local[t] = m
    nodes = {t: out.node[t][keep[t]].tolist() for t in num_nodes}
    rows, cols, eids = {}, {}, {}
    for e in ei:
        src, _, dst = e
        mine = out.batch[dst][out.col[e]] == b
        assert torch.equal(mine, out.batch[src][out.row[e]] == b)  # no edge joins two subgraphs
        rows[e] = local[src][out.row[e][mine]].tolist()
        cols[e] = local[dst][out.col[e][mine]].tolist()
        eids[e] = out.edge[e][mine].tolist()
    return nodes, rows, cols, eids


def test_disjoint_gives_each_seed_its_own_subgraph():
    num_nodes, ei = random_hetero(8)
    seeds = [5, 12, 5, 40]  # a repeated seed grows two subgraphs
    out = make_sampler(num_nodes, ei, [-1, -1], disjoint=True).sample("paper", torch.tensor(seeds), seed=4)
    assert out.batch["paper"][:4].tolist() == [0, 1, 2, 3]
    assert out.node["paper"][:4].tolist() == seeds
    for b, s in enumerate(seeds):
        assert per_seed(out, num_nodes, ei, b) == reference_full(num_nodes, ei, "paper", [s], 2)
    for t in num_nodes:  # a node is new once per subgraph
        pairs = torch.stack([out.batch[t], out.node[t]])
        assert pairs.unique(dim=1).shape[1] == out.node[t].numel()
        assert sum(out.num_sampled_nodes[t]) == out.node[t].numel()
    # sampled fan-outs: still real edges inside one subgraph, at most k per frontier position
    sampler = make_sampler(num_nodes, ei, [2, 2], disjoint=True)
    out = sampler.sample("paper", torch.tensor(seeds), seed=4)
    for b in range(len(seeds)):
        _, rows, cols, eids = per_seed(out, num_nodes, ei, b)
        for e in ei:
            assert torch.bincount(torch.tensor(cols[e], dtype=torch.int64)).max().item() <= 2 if cols[e] else True
    for e, v in ei.items():
        src, _, dst = e
        assert torch.equal(v[:, out.edge[e]], torch.stack([out.node[src][out.row[e]], out.node[dst][out.col[e]]]))
    again = sampler.sample("paper", torch.tensor(seeds), seed=4)
    assert all(torch.equal(again.batch[t], out.batch[t]) and torch.equal(again.node[t], out.node[t])
               for t in num_nodes)
    with pytest.raises(ValueError, match="induced=True with disjoint=True is not accepted"):
        make_sampler(num_nodes, ei, [2], disjoint=True, induced=True)


def temporal_sampler(num_nodes, ei, fan, *, node_time=None, edge_time=None, **kw):
    if node_time is not None:
        key = {e: node_time[e[0]][v[0].numpy()] for e, v in ei.items() if e[0] in node_time}
    else:
        key = {e: edge_time[e] for e in edge_time}
    graphs = {e: TypedCSC.from_edge_index(v, num_nodes[e[0]], num_nodes[e[2]], time=key.get(e))
              for e, v in ei.items()}
    return HeteroNeighborSampler(num_nodes, graphs, fan, node_time=node_time, edge_time=edge_time, **kw), key


@pytest.mark.parametrize("level", ["node", "edge"])
def test_temporal_sampling_keeps_neighbours_no_later_than_the_seed(level):
    num_nodes, ei = random_hetero(9)
    rng = np.random.default_rng(0)
    if level == "node":  # institutions have no time: edges into them are not restricted
        kw = dict(node_time={"paper": rng.integers(0, 20, 60), "author": rng.integers(0, 20, 80)})
    else:
        kw = dict(edge_time={CITES: rng.integers(0, 20, 300), WRITES: rng.integers(0, 20, 200)})
    seeds = torch.tensor([3, 8, 3, 51])
    seed_t = [12, 5, 0, 19]
    sampler, key = temporal_sampler(num_nodes, ei, [-1, -1], **kw)
    assert sampler.disjoint and sampler.temporal
    out = sampler.sample("paper", seeds, seed=1, seed_time=torch.tensor(seed_t))
    for b in range(4):
        assert per_seed(out, num_nodes, ei, b) == reference_full(num_nodes, ei, "paper", [int(seeds[b])], 2, key,
                                                                 seed_t[b])
    # "last": the latest k of those, exactly (edge types without times are sampled at random:
    # all of their in-edges here, to compare exactly)
    fan = {e: [2, 1] if e in key else [-1, -1] for e in ei}
    sampler, key = temporal_sampler(num_nodes, ei, fan, temporal_strategy="last", **kw)
    out = sampler.sample("paper", seeds, seed=1, seed_time=torch.tensor(seed_t))
    latest = lambda e, hop, cand: cand[-fan[e][hop]:] if e in key else cand
    for b in range(4):
        assert per_seed(out, num_nodes, ei, b) == reference_full(num_nodes, ei, "paper", [int(seeds[b])], 2, key,
                                                                 seed_t[b], take=latest)
    # "uniform" with a fan-out: a subset of the allowed in-edges, k of them where there are more
    sampler, key = temporal_sampler(num_nodes, ei, [2, 2], **kw)
    out = sampler.sample("paper", seeds, seed=1, seed_time=torch.tensor(seed_t))
    for e in key:
        src, _, dst = e
        t_seed = torch.tensor(seed_t)[out.batch[dst][out.col[e]]]
        assert bool((torch.as_tensor(key[e])[out.edge[e]] <= t_seed).all())


def test_temporal_seed_times_default_to_the_input_types_node_time():
    num_nodes, ei = random_hetero(10)
    t = {"paper": np.arange(60)[::-1].copy(), "author": np.arange(80) % 7}
    sampler, _ = temporal_sampler(num_nodes, ei, [-1, -1], node_time=t)
    seeds = torch.tensor([10, 40])
    a = sampler.sample("paper", seeds, seed=0)
    b = sampler.sample("paper", seeds, seed=0, seed_time=t["paper"][[10, 40]])
    assert all(torch.equal(a.node[x], b.node[x]) for x in num_nodes)
    for x, seed_t in (("paper", t["paper"]),):
        assert bool((torch.as_tensor(seed_t)[a.node[x]] <= torch.as_tensor(seed_t)[seeds][a.batch[x]]).all())
    with pytest.raises(ValueError, match="needs their times: pass seed_time, or node_time for 'inst'"):
        sampler.sample("inst", torch.tensor([1]), seed=0)
    with pytest.raises(ValueError, match="not sorted by time within the in-edges"):
        graphs = {e: TypedCSC.from_edge_index(v, num_nodes[e[0]], num_nodes[e[2]]) for e, v in ei.items()}
        HeteroNeighborSampler(num_nodes, graphs, [1], node_time=t)
    with pytest.raises(ValueError, match="temporal_strategy='first' is not accepted"):
        HeteroNeighborSampler(num_nodes, {}, [1], temporal_strategy="first")
    with pytest.raises(ValueError, match="node_time\\['paper'\\] has dtype int64 and shape \\(3,\\)"):
        HeteroNeighborSampler(num_nodes, {}, [1], node_time={"paper": np.arange(3)})


# -- weighted sampling (PyG's weight_attr per edge type) ------------------------------------------------------

def weighted_star(weights):
    """Paper 0's in-edges come from authors 1..d with these weights (WRITES); CITES has a few plain edges."""
    d = len(weights)
    num_nodes = {"paper": 4, "author": d + 1}
    ei = {WRITES: torch.stack([torch.arange(1, d + 1), torch.zeros(d, dtype=torch.int64)]),
          CITES: torch.tensor([[1, 2, 3, 1], [0, 0, 0, 2]])}
    return num_nodes, ei, {WRITES: torch.tensor(weights, dtype=torch.float64)}


@pytest.mark.parametrize("replace", [False, True])
def test_weighted_draws_never_take_zero_weight_edges(replace):
    num_nodes, ei, w = weighted_star([0.0, 1.0, 0.0, 2.0, 0.0, 5.0])
    seeds = torch.zeros(300, dtype=torch.int64)
    for k in (1, 2, 3):
        out = make_sampler(num_nodes, ei, [k], weight=w, replace=replace).sample("paper", seeds, seed=k)
        drawn = out.edge[WRITES]
        assert drawn.numel() == 300 * k  # three positive-weight edges: k distinct draws (or k with replacement)
        assert bool((w[WRITES][drawn] > 0).all())
    # without replacement a fan-out at least the in-degree takes every in-edge (PyG's rule), one over the
    # positive edges keeps those only
    out = make_sampler(num_nodes, ei, [6], weight=w).sample("paper", seeds[:1], seed=0)
    assert out.edge[WRITES].tolist() == [0, 1, 2, 3, 4, 5]
    out = make_sampler(num_nodes, ei, [4], weight=w).sample("paper", seeds[:1], seed=0)
    assert out.edge[WRITES].tolist() == [1, 3, 5]
    none = {WRITES: torch.zeros(6)}
    assert make_sampler(num_nodes, ei, [2], weight=none).sample("paper", seeds[:1], seed=0).edge[WRITES].numel() == 0


def test_weighted_draws_follow_the_weights():
    weights = [1.0, 2.0, 0.0, 3.0, 4.0, 0.0, 10.0]
    num_nodes, ei, w = weighted_star(weights)
    copies = 20000
    out = make_sampler(num_nodes, ei, [1], weight=w).sample("paper", torch.zeros(copies, dtype=torch.int64), seed=7)
    hits = torch.bincount(out.edge[WRITES], minlength=len(weights)).double() / copies
    expected = torch.tensor(weights, dtype=torch.float64) / sum(weights)
    assert hits[2] == hits[5] == 0
    assert torch.allclose(hits, expected, atol=0.015)  # ~4 standard deviations at 20000 draws
    # with replacement, k draws per copy follow the weights too
    out = make_sampler(num_nodes, ei, [3], weight=w, replace=True).sample(
        "paper", torch.zeros(copies // 3, dtype=torch.int64), seed=8)
    hits = torch.bincount(out.edge[WRITES], minlength=len(weights)).double() / out.edge[WRITES].numel()
    assert torch.allclose(hits, expected, atol=0.015)


def test_weights_change_only_their_edge_type_and_are_deterministic():
    num_nodes, ei = random_hetero(seed=4)
    rng = np.random.default_rng(0)
    w = {CITES: torch.from_numpy(rng.random(ei[CITES].shape[1]))}
    seeds = torch.arange(0, 60, 2)
    plain = make_sampler(num_nodes, ei, [3]).sample("paper", seeds, seed=11)
    runs = [make_sampler(num_nodes, ei, [3], weight=w, parallel=p).sample("paper", seeds, seed=11)
            for p in (True, False)]
    for e in ei:  # one hop: every edge type draws from its own stream; only CITES is weighted
        assert torch.equal(runs[0].edge[e], runs[1].edge[e])
        if e != CITES:
            assert torch.equal(runs[0].edge[e], plain.edge[e])
    assert not torch.equal(runs[0].edge[CITES], plain.edge[CITES])
    check_contract(runs[0], num_nodes, ei, "paper", seeds, {e: [3] for e in ei})


def test_weight_errors_name_the_edge_type():
    num_nodes, ei, w = weighted_star([1.0, 2.0])
    with pytest.raises(ValueError, match=r"weight\[\('author', 'writes', 'paper'\)\]: weight has shape \(3,\); "
                                         r"accepted: one weight per edge, shape \(2,\)"):
        make_sampler(num_nodes, ei, [1], weight={WRITES: torch.ones(3)})
    with pytest.raises(ValueError, match=r"weight\[\('author', 'writes', 'paper'\)\]: weight\[1\]=-1.0"):
        make_sampler(num_nodes, ei, [1], weight={WRITES: torch.tensor([1.0, -1.0])})
    with pytest.raises(ValueError, match=r"weight names edge type \('a', 'b', 'c'\), which the graph does not have"):
        make_sampler(num_nodes, ei, [1], weight={("a", "b", "c"): torch.ones(2)})
    with pytest.raises(ValueError, match="weight with temporal sampling"):
        make_sampler(num_nodes, ei, [1], weight=w, node_time={"author": np.zeros(3)})


def test_a_fan_out_far_above_every_in_degree_takes_whole_neighbourhoods_and_an_unfittable_one_is_named():
    num_nodes, ei = random_hetero(4)
    for kw in ({}, {"disjoint": True}, {"induced": True}):
        full = make_sampler(num_nodes, ei, [-1, -1], parallel=False, **kw).sample("paper", torch.arange(30), seed=1)
        big = make_sampler(num_nodes, ei, [2 ** 40, 2 ** 62], parallel=False, **kw).sample("paper", torch.arange(30),
                                                                                          seed=1)
        assert all(torch.equal(full.node[t], big.node[t]) for t in num_nodes)
        assert all(torch.equal(full.edge[e], big.edge[e]) for e in ei)
    sampler = make_sampler(num_nodes, ei, {e: [2, 2 ** 40 if e == WRITES else 2] for e in ei}, replace=True,
                           parallel=False)
    with pytest.raises(MemoryError, match=r"num_neighbors\[\('author', 'writes', 'paper'\)\]\[1\]=1099511627776 "
                                          r"would sample [\d,]+ edges .* [\d,]+ bytes"):
        sampler.sample("paper", torch.arange(30), seed=0)
    with pytest.raises(ValueError, match=r"num_neighbors\[0\] must be an int >= -1 and <= 9223372036854775807"):
        make_sampler(num_nodes, ei, [2 ** 63])


def _two_type_sampler(**kw):
    g = torch.Generator().manual_seed(0)
    ab = torch.stack([torch.randint(0, 30, (200,), generator=g), torch.randint(0, 20, (200,), generator=g)])
    graphs = {("a", "to", "b"): TypedCSC.from_edge_index(ab, 30, 20),
              ("b", "to", "a"): TypedCSC.from_edge_index(ab.flip(0), 20, 30)}
    return HeteroNeighborSampler({"a": 30, "b": 20}, graphs, [3, 2], **kw)


@pytest.mark.parametrize("disjoint", [False, True])
def test_seeds_of_several_types_start_their_types_and_one_type_keeps_its_stream(disjoint):
    sampler = _two_type_sampler(disjoint=disjoint)
    a, b = torch.tensor([1, 2, 3]), torch.tensor([4, 5])
    one, alone = sampler.sample(None, {"a": a}, seed=5), sampler.sample("a", a, seed=5)
    for t in ("a", "b"):  # a dict of one type is the single-type call
        assert torch.equal(one.node[t], alone.node[t])
    out = sampler.sample(None, {"a": a, "b": b}, seed=5)
    assert torch.equal(out.node["a"][:3], a) and torch.equal(out.node["b"][:2], b)
    assert out.num_sampled_nodes["a"][0] == 3 and out.num_sampled_nodes["b"][0] == 2
    if disjoint:  # pyg-lib numbers the seeds across the types of seed_dict, in its order
        assert torch.equal(out.batch["a"][:3], torch.arange(3)) and torch.equal(out.batch["b"][:2], torch.arange(3, 5))
        assert (out.batch["a"] < 5).all() and (out.batch["b"] < 5).all()
    with pytest.raises(TypeError, match="seeds with input_type=None must map node types"):
        sampler.sample(None, a, seed=5)


@pytest.mark.parametrize("options", [dict(), dict(induced=True), dict(disjoint=True), dict(replace=True),
                                     dict(weight="w"), dict(node_time="t"), dict(edge_time="t")], ids=repr)
def test_without_edge_ids_the_sample_is_the_same_less_its_edge_ids(options):
    """edge_ids=False: the same nodes, rows, columns and counts for every option, and edge[e] None for every
    edge type (weights and edge times, in edge_index order, are still put in CSC order through e_id)."""
    num_nodes, ei = random_hetero(seed=4)
    rng = np.random.default_rng(4)
    kw = {}
    if "weight" in options:
        kw["weight"] = {e: rng.random(v.shape[1]) for e, v in ei.items()}
    if "node_time" in options:
        kw["node_time"] = {t: rng.integers(0, 20, n) for t, n in num_nodes.items()}
    if "edge_time" in options:
        kw["edge_time"] = {e: rng.integers(0, 20, v.shape[1]) for e, v in ei.items()}
    kw.update({k: v for k, v in options.items() if k in ("induced", "disjoint", "replace")})
    make = (lambda **o: temporal_sampler(num_nodes, ei, [3, 2], **kw, **o)[0]) if "node_time" in kw or \
        "edge_time" in kw else (lambda **o: make_sampler(num_nodes, ei, [3, 2], **kw, **o))
    seeds = torch.tensor([0, 5, 17, 33])
    time = dict(seed_time=torch.full((4,), 15)) if "edge_time" in kw else {}
    a = make().sample("paper", seeds, seed=9, **time)
    b = make(edge_ids=False).sample("paper", seeds, seed=9, **time)
    assert sum(v.numel() for v in a.row.values()) > 0
    for e in ei:
        assert torch.equal(a.row[e], b.row[e]) and torch.equal(a.col[e], b.col[e]), e
        assert a.edge[e] is not None and b.edge[e] is None, e
    for t in num_nodes:
        assert torch.equal(a.node[t], b.node[t]), t
    assert (a.num_sampled_nodes, a.num_sampled_edges) == (b.num_sampled_nodes, b.num_sampled_edges)
    with pytest.raises(TypeError, match="edge_ids must be a bool, got 0"):
        make(edge_ids=0)
