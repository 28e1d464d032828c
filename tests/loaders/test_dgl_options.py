"""CompressedDGLDataLoader against DGL's own DataLoader, option by option, field by field.

Each case builds DGL's DataLoader and ours on one graph with one sampler and compares every batch:
the result's structure (tuple/list/dict, in DGL's order), every tensor's dtype, shape, device and
bits, and every graph (block or not, idtype, device, node counts per type, per type the source and
destination columns with dgl.NID, per edge type the edges and columns with dgl.EID). The cases are the
DGL options the other DGL test files do not reach: int32 graphs, `-1` fan-outs and per-etype dicts,
prob/mask/replace, `output_device`, `drop_last`, list/numpy/empty/dict indices, indices datasets,
the negative samplers Uniform/PerSourceUniform/GlobalUniform, callable/tensor/dict exclusions,
partial `reverse_etypes`, edge-wise Labor/Full/ShaDow-KHop samplers, ClusterGCN and SAINT subgraph
samplers, and `use_ddp` for edge-wise and heterogeneous loaders (in each rank's main process: DGL's
worker processes started under torch.multiprocessing sample differently from run to run, DGL against
itself alike). Negatives and exclusions are also checked for their samplers' properties.
Runs in .venv-dgl (`make test-dgl`).
"""
import os

import numpy as np
import pytest
import torch

# dgl: the module, or None where it does not import (test_dgl imports it, DGLBACKEND defaulting to pytorch)
from tests.loaders.test_dgl import assert_same_bits, dgl, make_graph, seed_all
from tests.loaders.test_dgl_hetero import assert_same_graph, make_hetero

pytestmark = [pytest.mark.dgl, pytest.mark.filterwarnings("ignore:Dataloader CPU affinity")]

N_NODES, N_EDGES = 500, 3000
PF = dict(prefetch_node_feats=["feat"], prefetch_labels=["label"], prefetch_edge_feats=["w"])
HPF = dict(prefetch_node_feats={"paper": ["feat"], "author": ["feat"]}, prefetch_labels={"paper": ["label"]},
           prefetch_edge_feats={"cites": ["w"]})


def assert_same_structure(a, b, where: str = "batch") -> None:
    """Two batches, recursively: same types and order, tensors bit for bit on the same device, graphs per type."""
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b), (where, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_structure(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), (where, list(a), list(b))
        for k in a:
            assert_same_structure(a[k], b[k], f"{where}[{k!r}]")
    elif torch.is_tensor(a):
        assert a.device == b.device, (where, a.device, b.device)
        assert_same_bits(a, b, where)
    elif isinstance(a, dgl.DGLGraph):
        assert (a.is_block, a.idtype, a.device) == (b.is_block, b.idtype, b.device), where
        assert a.ntypes == b.ntypes and [a.num_nodes(t) for t in a.ntypes] == [b.num_nodes(t) for t in b.ntypes]
        assert_same_graph(a, b, where)
        for side, types in (("srcnodes", a.srctypes), ("dstnodes", a.dsttypes)):
            for t in types:
                for key, value in getattr(a, side)[t].data.items():
                    assert value.device == getattr(b, side)[t].data[key].device, (where, side, t, key)
    else:
        assert a == b, (where, a, b)


def both(g, indices, make, epochs=1, **kw):
    """One run of DGL's loader and of ours (same seeds, the sampler made after seeding): their batches."""
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    out = []
    for cls in (dgl.dataloading.DataLoader, CompressedDGLDataLoader):
        seed_all(0)
        loader = cls(g, indices, make(), **kw)
        out.append([b for _ in range(epochs) for b in loader])
        out.append(len(loader))
    theirs, n_theirs, ours, n_ours = out
    assert len(ours) == len(theirs) == n_ours * epochs == n_theirs * epochs
    return ours, theirs


def assert_dgls_batches(g, indices, make, epochs=1, **kw):
    ours, theirs = both(g, indices, make, epochs, **kw)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert_same_structure(a, b, f"batch {i}")
    return ours


@pytest.fixture(scope="module")
def graphs():
    if dgl is None:
        pytest.skip("dgl is not importable here (make test-dgl)")
    g = make_graph(num_nodes=N_NODES, num_edges=N_EDGES)
    g.edata["p"] = torch.rand(N_EDGES, generator=torch.Generator().manual_seed(1))
    g.edata["m"] = g.edata["p"] > 0.5
    return {"g": g, "g32": g.int(), "h": make_hetero(), "h32": make_hetero().int()}


def _negatives(neg):
    """A negative sampler of dgl.dataloading.negative_sampler from its name and arguments (None: none)."""
    return getattr(dgl.dataloading.negative_sampler, neg[0])(*neg[1:]) if neg else None


def _nodes(fanouts, **kw):
    return lambda: dgl.dataloading.NeighborSampler(fanouts, **{**PF, **kw})


def _edges(node_wise=None, neg=None, **kw):
    """A maker of an edge-wise sampler around `node_wise()` (default: fan-outs [3, 2]), negatives `neg`."""
    return lambda: dgl.dataloading.as_edge_prediction_sampler(
        node_wise() if node_wise else _nodes([3, 2])(), negative_sampler=_negatives(neg), **kw)


def _hnodes(fanouts, **kw):
    return lambda: dgl.dataloading.NeighborSampler(fanouts, **{**HPF, **kw})


def _hedges(neg=None, **kw):
    return _edges(_hnodes([3, 2]), neg, **kw)


SEEDS, EDGES = torch.arange(0, N_NODES, 3), torch.arange(0, N_EDGES, 7)
PAPERS = {"paper": torch.arange(0, 400, 3)}
HEDGES = {"cites": torch.arange(0, 1600, 20), "writes": torch.arange(0, 900, 15)}
HETERO_ETYPES = ("writes", "written_by", "cites", "has_topic", "topic_of")
WRITES = (("author", "writes", "paper"), ("paper", "written_by", "author"))

# name: (graph, indices, sampler maker, DataLoader options) on the `graphs` fixture
CASES = {
    "int32 graph": ("g32", SEEDS.int(), _nodes([4, 3]), {}),
    "fanout -1": ("g", SEEDS, _nodes([-1, 3]), {}),
    "prob": ("g", SEEDS, _nodes([4, 3], prob="p"), {}),
    "mask": ("g", SEEDS, _nodes([4, 3], mask="m"), {}),
    "replace": ("g", SEEDS, _nodes([4, 3], replace=True), {}),
    "output_device cpu": ("g", SEEDS, _nodes([4, 3], output_device="cpu"), {"device": "cpu"}),
    "drop_last": ("g", SEEDS, _nodes([4, 3]), {"drop_last": True}),
    "drop_last workers": ("g", SEEDS, _nodes([4, 3]), {"drop_last": True, "num_workers": 2}),
    "list indices": ("g", SEEDS.tolist(), _nodes([4, 3]), {}),
    "numpy indices": ("g", SEEDS.numpy(), _nodes([4, 3]), {}),
    "empty indices": ("g", SEEDS[:0], _nodes([4, 3]), {"num_workers": 2}),
    # DGL makes float tensors of these (torch.tensor([])) and takes them: no batch
    "empty list indices": ("g", [], _nodes([4, 3]), {}),
    "empty numpy float indices": ("g", np.array([]), _nodes([4, 3]), {"num_workers": 2}),
    "dict indices, dict prefetch": ("g", {"_N": SEEDS}, _nodes(
        [4, 3], prefetch_node_feats={"_N": ["feat"]}, prefetch_edge_feats={"_E": ["w"]}), {}),
    "persistent workers": ("g", SEEDS, _nodes([4, 3]), {"num_workers": 1, "persistent_workers": True, "epochs": 2}),
    "hetero int32": ("h32", {"paper": PAPERS["paper"].int()}, _hnodes([3, 2]), {}),
    "hetero -1 fanout dicts": ("h", PAPERS, _hnodes([dict(zip(HETERO_ETYPES, (-1, 1, -1, 0, 2)))] * 2), {}),
    "hetero canonical fanout keys": ("h", PAPERS, _hnodes([{("paper", "cites", "paper"): 2, WRITES[0]: 2,
                                                            WRITES[1]: 1, ("paper", "has_topic", "field"): 1,
                                                            ("field", "topic_of", "paper"): 2}] * 2), {}),
    "hetero full": ("h", {**PAPERS, "author": torch.arange(0, 250, 5)},
                    lambda: dgl.dataloading.MultiLayerFullNeighborSampler(2, **HPF), {}),
    "hetero empty seed type": ("h", {**PAPERS, "author": torch.arange(0)}, _hnodes([3, 2]), {}),
    "hetero empty list seed type": ("h", {**PAPERS, "author": []}, _hnodes([3, 2]), {}),
    "edge int32": ("g32", EDGES.int(), _edges(neg=("Uniform", 2), exclude="self"), {}),
    "edge PerSourceUniform": ("g", EDGES, _edges(neg=("PerSourceUniform", 2)), {}),
    "edge GlobalUniform": ("g", EDGES, _edges(neg=("GlobalUniform", 3)), {}),
    "edge GlobalUniform replace": ("g", EDGES, _edges(neg=("GlobalUniform", 3, False, True)), {"num_workers": 2}),
    "edge exclude callable": ("g", EDGES, _edges(exclude=lambda e: torch.cat([e, torch.arange(100)])), {}),
    "edge exclude tensor": ("g", EDGES, _edges(exclude=torch.arange(1000)), {}),
    "edge reverse_types on one type": ("g", {"_E": EDGES}, _edges(exclude="reverse_types",
                                                                  reverse_etypes={"_E": "_E"}), {}),
    "edge labor": ("g", EDGES, _edges(lambda: dgl.dataloading.LaborSampler([3, 2], **PF), ("Uniform", 1),
                                      exclude="self"), {}),
    "edge full": ("g", EDGES, _edges(lambda: dgl.dataloading.MultiLayerFullNeighborSampler(2, **PF),
                                     exclude="self"), {}),
    "edge shadow": ("g", EDGES, _edges(lambda: dgl.dataloading.ShaDowKHopSampler([3, 2], prefetch_node_feats=["feat"]),
                                       ("Uniform", 1), exclude="self"), {}),
    "edge empty": ("g", EDGES[:0], _edges(neg=("Uniform", 1)), {}),
    "edge empty list": ("g", [], _edges(neg=("Uniform", 1), exclude="self"), {}),
    "hetero edge GlobalUniform": ("h", HEDGES, _hedges(("GlobalUniform", 2)), {"num_workers": 2}),
    "hetero edge exclude dict": ("h", {"cites": HEDGES["cites"]}, _hedges(exclude={
        ("paper", "cites", "paper"): torch.arange(500)}), {}),
    "hetero edge partial reverse_types": ("h", HEDGES, _hedges(exclude="reverse_types",
                                                               reverse_etypes={"writes": "written_by"}), {}),
    "hetero edge canonical reverse_types": ("h", {"writes": HEDGES["writes"]}, _hedges(
        exclude="reverse_types", reverse_etypes=dict([WRITES])), {}),
    "hetero edge canonical seeds, empty type": ("h", {("paper", "cites", "paper"): HEDGES["cites"],
                                                      "writes": torch.arange(0)}, _hedges(("Uniform", 2)), {}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_dgls_batches_field_by_field(graphs, name):
    graph, indices, make, kw = CASES[name]
    kw = {"batch_size": 40, "shuffle": True, **kw}
    ours = assert_dgls_batches(graphs[graph], indices, make, **kw)
    assert len(ours) > 0 or "empty" in name


def _edge_set(g, etype=None):
    src, dst = g.edges(etype=etype)
    return set(zip(src.tolist(), dst.tolist()))


@pytest.mark.parametrize("name", ["edge PerSourceUniform", "edge GlobalUniform", "edge GlobalUniform replace",
                                  "hetero edge GlobalUniform"])
def test_negatives_have_their_samplers_properties(graphs, name):
    """Beyond equality with DGL: PerSourceUniform keeps each positive's source k times; GlobalUniform draws
    pairs that are not edges of the graph (no self-loops by default), at most k per positive."""
    graph, indices, make, kw = CASES[name]
    g = graphs[graph]
    ours = assert_dgls_batches(g, indices, make, batch_size=40, shuffle=True, **kw)
    neg_sampler = make().negative_sampler
    for _, pair, neg, _ in ours:
        for et in pair.canonical_etypes:
            nid_s, nid_d = (pair.nodes[t].data[dgl.NID] for t in (et[0], et[2]))
            src, dst = pair.edges(etype=et)
            nsrc, ndst = neg.edges(etype=et)
            assert torch.equal(neg.nodes[et[0]].data[dgl.NID], nid_s)
            if isinstance(neg_sampler, dgl.dataloading.negative_sampler.PerSourceUniform):
                assert torch.equal(nid_s[nsrc], nid_s[src].repeat_interleave(neg_sampler.k))
            else:
                assert len(nsrc) <= neg_sampler.k * len(src)
                edges = _edge_set(g, et)
                assert not set(zip(nid_s[nsrc].tolist(), nid_d[ndst].tolist())) & edges
                if neg_sampler.exclude_self_loops and et[0] == et[2]:
                    assert (nid_s[nsrc] != nid_d[ndst]).all()


@pytest.mark.parametrize("name,excluded", [
    ("edge exclude callable", lambda seeds: torch.cat([seeds, torch.arange(100)])),
    ("edge exclude tensor", lambda seeds: torch.arange(1000)),
])
def test_excluded_edges_are_absent_from_every_block(graphs, name, excluded):
    graph, indices, make, kw = CASES[name]
    for _, pair, blocks in assert_dgls_batches(graphs[graph], indices, make, batch_size=40, **kw):
        for block in blocks:
            assert not torch.isin(block.edata[dgl.EID], excluded(pair.edata[dgl.EID])).any()


class IdBatches(torch.utils.data.Dataset):
    """An indices dataset of DGL's kind (any dataset with a `device` that torch.tensor cannot convert; its
    items are the batches): ten ids a batch, or ten ids of type `key` ({key: ids})."""

    device = torch.device("cpu")

    def __init__(self, n: int, step: int, top: int, form: str = "ids", key=None):
        self.n, self.step, self.top, self.form, self.key = n, step, top, form, key

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i >= self.n:
            raise IndexError(i)
        ids = torch.arange(i * self.step, i * self.step + 10) % self.top
        return {self.key: ids} if self.form == "dict" else ids


class OneIdBatches(torch.utils.data.IterableDataset):
    """A stream of single ids (0-d tensors), each a batch of one node for DGL's samplers."""

    device = torch.device("cpu")

    def __init__(self, n: int, step: int, top: int):
        self.n, self.step, self.top = n, step, top

    def __iter__(self):
        return iter([torch.tensor(i * self.step % self.top) for i in range(self.n)])

    def __len__(self):
        return self.n


@pytest.mark.parametrize("case,num_workers", [("nodes", 0), ("nodes", 2), ("one node", 0), ("edges", 0),
                                              ("hetero edges reverse_types", 0), ("hetero edges reverse_id", 2)])
def test_an_indices_dataset_gives_dgls_batches(graphs, case, num_workers):
    """DGL iterates an `indices` it cannot make a tensor of as a dataset of batches; the loader took it
    for seed ids (torch.as_tensor iterated it, then refused or never ended)."""
    g, make, batches = graphs["g"], _nodes([4, 3]), IdBatches(8, 37, N_NODES)
    if case == "one node":
        batches = OneIdBatches(8, 37, N_NODES)
    elif case == "edges":
        make, batches = _edges(), IdBatches(8, 37, N_EDGES)
    elif case.startswith("hetero"):  # the reverse edges are checked in the form given
        g, batches = graphs["h"], IdBatches(8, 37, 1600, "dict", "cites")
        cites = ("paper", "cites", "paper")
        make = (_hedges(exclude="reverse_types", reverse_etypes={"writes": "written_by"}) if "types" in case else
                _hedges(exclude="reverse_id", reverse_eids={cites: torch.arange(1600).flip(0)}))
    ours = assert_dgls_batches(g, batches, make, num_workers=num_workers)
    assert len(ours) == 8
    if case.endswith("node"):
        assert [b[1].numel() for b in ours] == [1] * 8


def test_an_indices_datasets_batches_are_checked_as_they_come(graphs):
    """Such a dataset's ids cannot be checked up front: each batch is, before DGL samples it (DGL's
    samplers read out of bounds on an id outside the graph)."""
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    loader = CompressedDGLDataLoader(graphs["g"], IdBatches(10, 60, 10 ** 9), _nodes([4, 3])())
    with pytest.raises(IndexError, match=r"a batch of the indices dataset contains node 540 at position 0, "
                                         r"outside \[0, 500\)"):
        list(loader)
    loader = CompressedDGLDataLoader(graphs["g"], OneIdBatches(10, 60, 10 ** 9), _nodes([4, 3])())
    with pytest.raises(IndexError, match=r"a batch of the indices dataset contains node 540 at position 0"):
        list(loader)
    with pytest.raises(KeyError, match=r"reverse_eids has no entry for edge type \('paper', 'cites', 'paper'\)"):
        CompressedDGLDataLoader(graphs["h"], IdBatches(8, 37, 1600, "dict", "cites"), _hedges(
            exclude="reverse_id", reverse_eids={"cites": torch.arange(1600)})())  # DGL: canonical keys


def test_subgraph_samplers_give_dgls_batches(graphs, tmp_path):
    """ClusterGCNSampler and SAINTSampler return one subgraph and name their features prefetch_ndata /
    prefetch_edata; their indices are partition ids / batch numbers, not node ids (SAINT's here run past
    the node count). The loader refused them."""
    g = graphs["g"]
    cluster = lambda: dgl.dataloading.ClusterGCNSampler(  # noqa: E731
        g, 20, cache_path=str(tmp_path / "cluster.pkl"), prefetch_ndata=["feat", "label"], prefetch_edata=["w"])
    for batch in assert_dgls_batches(g, torch.arange(20), cluster, batch_size=4, shuffle=True):
        assert isinstance(batch, dgl.DGLGraph)
        assert_same_bits(batch.ndata["feat"], g.ndata["feat"][batch.ndata[dgl.NID]], "cluster feat")
        assert_same_bits(batch.edata["w"], g.edata["w"][batch.edata[dgl.EID]], "cluster w")
    saint = lambda: dgl.dataloading.SAINTSampler("node", 60, prefetch_ndata=["feat"])  # noqa: E731
    ours = assert_dgls_batches(g, torch.arange(N_NODES, N_NODES + 6), saint, num_workers=2)
    assert len(ours) == 6
    assert_same_bits(ours[-1].ndata["feat"], g.ndata["feat"][ours[-1].ndata[dgl.NID]], "saint feat")


def test_dgl_options_the_loader_cannot_take_are_refused_by_name(graphs):
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader as L

    g, h = graphs["g"], graphs["h"]
    with pytest.raises(NotImplementedError, match=r"graph_sampler.output_device='cuda' is not supported.*accepted: "
                                                  r"output_device=None or 'cpu', with device='cuda'"):
        L(g, SEEDS, _nodes([2], output_device="cuda")())
    with pytest.raises(NotImplementedError,
                       match=r"graph_sampler.sampler.output_device=device\(type='cuda', index=0\)"):
        s = _edges()()
        s.sampler.output_device = torch.device("cuda", 0)
        L(g, EDGES, s)
    with pytest.raises(ValueError, match=r"indices is on meta; the loader samples on the CPU .*accepted: indices on "
                                         r"the CPU"):
        L(g, torch.arange(3, device="meta"), _nodes([2])())
    rev = np.arange(N_EDGES)[::-1].copy()
    for value in (rev, rev.tolist()):  # DGL fails in the workers, inside torch.index_select
        with pytest.raises(TypeError, match=rf"graph_sampler.reverse_eids is {type(value).__name__}; accepted: a "
                                            "torch tensor of edge ids"):
            L(g, EDGES, _edges(exclude="reverse_id", reverse_eids=value)())
    # the inner sampler's arguments are named once (they were "graph_sampler.sampler.graph_sampler....")
    with pytest.raises(ValueError, match=r"^graph_sampler.sampler.prefetch_node_feats=\['feat'\] is a list"):
        L(h, {"cites": torch.arange(3)}, dgl.dataloading.as_edge_prediction_sampler(
            dgl.dataloading.NeighborSampler([2], prefetch_node_feats=["feat"])))


def _ddp_rank(rank: int, world_size: int, init_file: str, out_dir: str) -> None:
    """Each rank: DGL's loader and ours with use_ddp=True, edge-wise (homogeneous, heterogeneous) and
    heterogeneous node-wise, with and without drop_last; the verdicts are written to out_dir."""
    import datetime
    import faulthandler
    import json
    import sys

    faulthandler.dump_traceback_later(200, exit=True, file=sys.stderr)
    import torch.distributed.nn  # noqa: F401  (before the group: see tests/examples/test_dgl_examples.py)
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                                         world_size=world_size, timeout=datetime.timedelta(seconds=150))
    g, h = make_graph(num_nodes=N_NODES, num_edges=N_EDGES), make_hetero()
    rev = torch.arange(N_EDGES)  # a reverse id map of the right length (self-reverse)
    cases = {
        "edge": (g, EDGES, _edges(neg=("Uniform", 2), exclude="reverse_id", reverse_eids=rev)),
        "hetero edge": (h, HEDGES, _hedges(("GlobalUniform", 2), exclude="reverse_types",
                                           reverse_etypes={"writes": "written_by"})),
        "hetero node": (h, {"paper": torch.arange(0, 400, 3), "author": torch.arange(0, 250, 7)}, _hnodes([2, 2])),
    }
    verdicts = {}
    for name, (graph, indices, make) in cases.items():
        for drop_last in (False, True):
            key = f"{name} drop_last={drop_last}"
            try:  # in the main process: DataLoader workers forked from a rank with gloo threads may hang
                ours, theirs = both(graph, indices, make, epochs=2, use_ddp=True, ddp_seed=3, batch_size=32,
                                    shuffle=True, drop_last=drop_last)
                for i, (a, b) in enumerate(zip(ours, theirs)):
                    assert_same_structure(a, b, f"batch {i}")
                seeds = [_seed_ids(b) for b in ours[:len(ours) // 2]]
                verdicts[key] = {"ok": True, "seeds": {t: torch.cat([s[t] for s in seeds]).tolist()
                                                       for t in seeds[0]}}
            except Exception as e:  # noqa: BLE001  (reported by the test)
                verdicts[key] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as f:
        json.dump(verdicts, f)
    torch.distributed.destroy_process_group()


def _seed_ids(batch) -> dict:
    """A batch's seeds per type: node-wise its output nodes, edge-wise its pair graph's edge ids."""
    if isinstance(batch[1], dgl.DGLGraph):
        pair = batch[1]
        return {str(et): pair.edges[et].data[dgl.EID] for et in pair.canonical_etypes}
    return {str(t): ids for t, ids in batch[1].items()} if isinstance(batch[1], dict) else {"_N": batch[1]}


def test_use_ddp_edge_wise_and_hetero_ranks_get_dgls_batches(tmp_path):
    """Two gloo ranks: every rank's batches are DGL's own for edge-wise (with negatives and exclusions) and
    heterogeneous loaders, drop_last or not, two epochs; the ranks' seeds are disjoint and, without
    drop_last, cover every seed (DGL pads the shorter rank with its own seeds)."""
    import json

    from tests.examples.ranks import run_ranks

    run_ranks("tests.loaders.test_dgl_options", "_ddp_rank", tmp_path)
    ranks = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(2)]
    failed = {f"rank {r}: {k}": v["error"] for r, got in enumerate(ranks) for k, v in got.items() if not v["ok"]}
    assert not failed, failed
    assert len(ranks[0]) == 6
    expected = {"edge": {"('_N', '_E', '_N')": EDGES},
                "hetero edge": {"('paper', 'cites', 'paper')": HEDGES["cites"],
                                "('author', 'writes', 'paper')": HEDGES["writes"]},
                "hetero node": {"paper": torch.arange(0, 400, 3), "author": torch.arange(0, 250, 7)}}
    for key in ranks[0]:
        per_rank = [ranks[r][key]["seeds"] for r in range(2)]
        for t in per_rank[0]:
            seen = [set(s[t]) for s in per_rank]
            total = set(expected[key.split(" drop_last")[0]].get(t, torch.arange(0)).tolist())
            assert seen[0] | seen[1] <= total, (key, t)
            if "drop_last=True" in key:  # each rank its own range of the seeds
                assert not seen[0] & seen[1], (key, t)
            else:
                assert seen[0] | seen[1] == total, (key, t)


@pytest.mark.dgl
def test_a_cuda_device_without_cuda_is_refused_by_name(monkeypatch):
    # DGL's own DataLoader (and ours, before) raised torch's "Found no NVIDIA driver", naming no argument
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    g = make_graph(num_nodes=100, num_edges=400)
    with pytest.raises(ValueError, match=r"device='cuda' but torch sees no CUDA device; use device='cpu'"):
        CompressedDGLDataLoader(g, torch.arange(10), dgl.dataloading.NeighborSampler([2]), device="cuda")


#: run in a fresh interpreter (tests/loaders/test_worker_kernels.py says why): builds CompressedDGLDataLoader
#: (num_workers=1) on `GRAPH`, then samples, gathers and encodes batches as its worker does, printing the
#: kernels numba compiled or loaded meanwhile (none expected).
_WORKER_SCRIPT = """
import torch
import dgl
from ibp_graph.data.store import EncodedTable
from ibp_graph.loaders.dgl import CompressedDGLDataLoader
from tests.loaders.test_dgl import make_graph
from tests.loaders.worker_kernels import compiled_as_a_worker

g = make_graph(num_nodes=600, num_edges=5000)
g.edata["w"] = torch.randn(5000, 2).half()
g = {GRAPH}
stores = {STORES}
sampler = dgl.dataloading.NeighborSampler([4, 2], prefetch_node_feats=["feat"], prefetch_labels=["label"],
                                          prefetch_edge_feats=["w"])
loader = CompressedDGLDataLoader(g, torch.arange(600).to(g.idtype), sampler, batch_size=64, num_workers=1,
                                 node_stores=stores)


def batches():
    for size in (1, 9, 64):
        loader._compressing.sample(g, torch.arange(size).to(g.idtype))


print("compiled in the worker:", compiled_as_a_worker(batches))
"""


@pytest.mark.parametrize("graph,stores", [("g", "None"), ("g.int()", "{'feat': EncodedTable.encode(g.ndata['feat'], "
                                                                      "'ebp', progress=False)}")],
                         ids=["graph columns", "int32 graph, a pre-encoded store"])
def test_sampling_batches_as_a_worker_compiles_nothing_the_loader_did_not(graph, stores):
    import subprocess
    import sys

    script = _WORKER_SCRIPT.replace("{GRAPH}", graph).replace("{STORES}", stores)
    got = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "DGLBACKEND": "pytorch"})
    assert got.returncode == 0, got.stderr[-3000:]
    assert got.stdout.strip().splitlines()[-1] == "compiled in the worker: []", got.stdout[-2000:]
