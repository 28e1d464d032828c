"""CompressedDGLDataLoader against DGL's own DataLoader: graph shapes, feature dtypes and inputs the other DGL
test files do not reach, and the inputs DGL takes or refuses that the loader read otherwise.

Every batch is compared with DGL's field by field (tests.loaders.test_dgl_options.assert_same_structure: the
structure, every tensor's dtype, shape, device and bits, every graph per type with dgl.NID / dgl.EID):
graphs with two node types and one edge type (user -> item), with one node type and two edge types, with
node and edge types that have no nodes or edges; prefetched columns of every dtype DGL keeps (bool, float16,
bfloat16, int8, uint8, int32, float64, 3-d rows, zero-width rows, a non-contiguous column); heterogeneous
edge-wise loaders with LaborSampler / MultiLayerFullNeighborSampler and each kind of `exclude`; the
documented custom Sampler that marks LazyFeatures itself. Then what the loader read otherwise than DGL:
integer batch sizes that are not Python ints, `device_cache` on a graph with one node type and several edge
types, node ids as a tensor on a graph with several node types, a prefetch name given as a string, and
seeds whose dtype is not the graph's idtype (refused up front, by name). Runs in .venv-dgl (`make test-dgl`).
"""
import numpy as np
import pytest
import torch

from tests.loaders.test_dgl import assert_same_bits, dgl, make_graph, seed_all
from tests.loaders.test_dgl_hetero import make_hetero
from tests.loaders.test_dgl_options import assert_dgls_batches, assert_same_structure

pytestmark = [pytest.mark.dgl, pytest.mark.filterwarnings("ignore:Dataloader CPU affinity")]

N_NODES, N_EDGES = 500, 3000
CITES, WRITES = ("paper", "cites", "paper"), ("author", "writes", "paper")
WRITTEN_BY = ("paper", "written_by", "author")
HPF = dict(prefetch_node_feats={"paper": ["feat"], "author": ["feat"]}, prefetch_labels={"paper": ["label"]},
           prefetch_edge_feats={"cites": ["w"]})
HEDGES = {"cites": torch.arange(0, 1600, 20), "writes": torch.arange(0, 900, 15)}


def _bipartite(gen):
    """Users and items, one edge type (user buys item): two node types, so prefetches are per type, but a
    tensor of edge ids is enough to seed an edge-wise sampler."""
    g = dgl.heterograph({("user", "buys", "item"): (torch.randint(0, 300, (2000,), generator=gen),
                                                    torch.randint(0, 200, (2000,), generator=gen))},
                        num_nodes_dict={"user": 300, "item": 200})
    g.nodes["user"].data["feat"] = torch.randn(300, 8, generator=gen)
    g.nodes["item"].data["feat"] = torch.randn(200, 8, generator=gen)
    g.nodes["item"].data["label"] = torch.randn(200, generator=gen)
    g.edges["buys"].data["w"] = torch.randn(2000, 2, generator=gen)
    return g


def _relational(gen):
    """One node type, two edge types (n -a-> n, n -b-> n): node prefetches are lists, edge ones per type."""
    g = dgl.heterograph({("n", "a", "n"): (torch.randint(0, 300, (1500,), generator=gen),
                                           torch.randint(0, 300, (1500,), generator=gen)),
                         ("n", "b", "n"): (torch.randint(0, 300, (1500,), generator=gen),
                                           torch.randint(0, 300, (1500,), generator=gen))})
    g.ndata["feat"] = torch.randn(300, 8, generator=gen)
    g.ndata["label"] = torch.randn(300, generator=gen)
    g.edges["a"].data["w"] = torch.randn(1500, 2, generator=gen)
    return g


def _sparse_types(gen):
    """A node type with no nodes and an edge type with no edges, both with prefetched (empty) columns."""
    g = dgl.heterograph({("a", "r", "b"): (torch.randint(0, 50, (300,), generator=gen),
                                           torch.randint(0, 40, (300,), generator=gen)),
                         ("c", "s", "b"): (torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)),
                         ("b", "t", "a"): (torch.randint(0, 40, (300,), generator=gen),
                                           torch.randint(0, 50, (300,), generator=gen))},
                        num_nodes_dict={"a": 50, "b": 40, "c": 0})
    for t, n in (("a", 50), ("b", 40), ("c", 0)):
        g.nodes[t].data["x"] = torch.randn(n, 8, generator=gen)
    g.edges["s"].data["w"] = torch.randn(0, 3)
    g.edges["r"].data["w"] = torch.randn(300, 3, generator=gen)
    return g


#: columns of every dtype and row shape DGL keeps, prefetched together ("nc" is a non-contiguous view)
NODE_DTYPES = {"b": lambda n, gen: torch.rand(n, generator=gen) > 0.5,
               "h": lambda n, gen: torch.randn(n, 3, generator=gen).half(),
               "bf": lambda n, gen: torch.randn(n, 3, generator=gen).bfloat16(),
               "i8": lambda n, gen: torch.randint(-5, 5, (n, 4), generator=gen, dtype=torch.int8),
               "u8": lambda n, gen: torch.randint(0, 255, (n, 4), generator=gen, dtype=torch.uint8),
               "i32": lambda n, gen: torch.randint(0, 1000, (n,), generator=gen, dtype=torch.int32),
               "f64": lambda n, gen: torch.randn(n, 2, generator=gen, dtype=torch.float64),
               "t3": lambda n, gen: torch.randn(n, 2, 3, generator=gen),
               "e0": lambda n, gen: torch.randn(n, 0),
               "nc": lambda n, gen: torch.randn(4, n, generator=gen).t()}


def _dtypes(gen):
    g = make_graph(num_nodes=N_NODES, num_edges=N_EDGES)
    for name, make in NODE_DTYPES.items():
        g.ndata[name] = make(N_NODES, gen)
    g.edata["eb"] = torch.rand(N_EDGES, generator=gen) > 0.5
    g.edata["e16"] = torch.randint(0, 9, (N_EDGES, 2), generator=gen, dtype=torch.int16)
    return g


@pytest.fixture(scope="module")
def graphs():
    if dgl is None:
        pytest.skip("dgl is not importable here (make test-dgl)")
    gen = torch.Generator().manual_seed(0)
    return {"g": make_graph(num_nodes=N_NODES, num_edges=N_EDGES), "h": make_hetero(), "h32": make_hetero().int(),
            "bipartite": _bipartite(gen), "relational": _relational(gen), "sparse types": _sparse_types(gen),
            "dtypes": _dtypes(gen)}


def _neg(name, *args):
    return getattr(dgl.dataloading.negative_sampler, name)(*args)


def _edge_wise(node_wise, neg=None, **kw):
    return lambda: dgl.dataloading.as_edge_prediction_sampler(node_wise(), negative_sampler=_neg(*neg) if neg else None,
                                                              **kw)


class LazyMarking(dgl.dataloading.Sampler if dgl is not None else object):
    """DGL's guide's custom sampler (guide-minibatch-prefetching): it samples the blocks and marks the features
    with LazyFeature itself, naming a parent column other than the key ("lab" <- "label")."""

    def __init__(self, fanouts):
        super().__init__()
        self.fanouts = fanouts

    def sample(self, g, seed_nodes):
        output_nodes, blocks = seed_nodes, []
        for fanout in reversed(self.fanouts):
            block = dgl.to_block(g.sample_neighbors(seed_nodes, fanout), seed_nodes)
            seed_nodes = block.srcdata[dgl.NID]
            blocks.insert(0, block)
        blocks[0].srcdata["feat"] = dgl.LazyFeature("feat")
        blocks[-1].dstdata["lab"] = dgl.LazyFeature("label")
        blocks[0].edata["w"] = dgl.LazyFeature("w")
        return seed_nodes, output_nodes, blocks


_BI = dict(prefetch_node_feats={"user": ["feat"], "item": ["feat"]}, prefetch_edge_feats={"buys": ["w"]})
_REL = dict(prefetch_node_feats=["feat"], prefetch_labels=["label"], prefetch_edge_feats={"a": ["w"]})
_SPARSE = dict(prefetch_node_feats={"a": ["x"], "b": ["x"], "c": ["x"]}, prefetch_edge_feats={"s": ["w"], "r": ["w"]})
_NS = dgl.dataloading.NeighborSampler if dgl is not None else None
_REVERSE_IDS = {CITES: torch.arange(1600).flip(0), WRITES: torch.arange(900).flip(0)}

# name: (graph, indices, sampler maker, DataLoader options) on the `graphs` fixture
CASES = {
    "bipartite nodes": ("bipartite", {"item": torch.arange(0, 200, 3)},
                        lambda: _NS([3, 2], prefetch_labels={"item": ["label"]}, **_BI), {}),
    "bipartite edges as a tensor, PerSourceUniform": ("bipartite", torch.arange(0, 2000, 13), _edge_wise(
        lambda: _NS([3, 2], **_BI), ("PerSourceUniform", 2), exclude="self", prefetch_labels=["w"]), {}),
    "bipartite edges, GlobalUniform": ("bipartite", {"buys": torch.arange(0, 2000, 13)}, _edge_wise(
        lambda: _NS([3, 2], **_BI), ("GlobalUniform", 2), prefetch_labels={"buys": ["w"]}), {"num_workers": 2}),
    "one node type, two edge types: nodes": ("relational", torch.arange(0, 300, 3), lambda: _NS([3, 2], **_REL), {}),
    "one node type, two edge types: edges, reverse_types": (
        "relational", {"a": torch.arange(0, 1500, 13), "b": torch.arange(0, 1500, 17)},
        _edge_wise(lambda: _NS([3, 2], prefetch_node_feats=["feat"], prefetch_edge_feats={"a": ["w"]}),
                   ("Uniform", 2), exclude="reverse_types", reverse_etypes={"a": "b", "b": "a"},
                   prefetch_labels={"a": ["w"]}), {}),
    "types without nodes or edges: nodes": ("sparse types", {"b": torch.arange(40)}, lambda: _NS([3, 2], **_SPARSE),
                                            {"batch_size": 7}),
    "types without nodes or edges: edges": ("sparse types", {"r": torch.arange(0, 300, 3)}, _edge_wise(
        lambda: _NS([3, 2], **_SPARSE), ("Uniform", 2), exclude="self", prefetch_labels={"s": ["w"], "r": ["w"]}),
        {"batch_size": 7, "num_workers": 2}),
    "every dtype: nodes": ("dtypes", torch.arange(0, N_NODES, 3), lambda: _NS(
        [3, 2], prefetch_node_feats=list(NODE_DTYPES), prefetch_labels=list(NODE_DTYPES),
        prefetch_edge_feats=["eb", "e16"]), {}),
    "every dtype: edges": ("dtypes", torch.arange(0, N_EDGES, 13), _edge_wise(
        lambda: _NS([2], prefetch_node_feats=list(NODE_DTYPES), prefetch_edge_feats=["e16"]), ("Uniform", 1),
        prefetch_labels=["eb", "e16"]), {"num_workers": 2}),
    "one layer: a name in node feats, labels and twice in edge feats": ("g", torch.arange(0, N_NODES, 3), lambda: _NS(
        [3], prefetch_node_feats=["feat", "label"], prefetch_labels=["feat", "label"], prefetch_edge_feats=["w", "w"]),
        {}),
    "hetero labor, reverse_id": ("h", HEDGES, _edge_wise(
        lambda: dgl.dataloading.LaborSampler([3, 2], **HPF), ("Uniform", 2), exclude="reverse_id",
        reverse_eids=_REVERSE_IDS, prefetch_labels={"cites": ["w"]}), {}),
    "hetero labor, importance sampling": ("h", {"paper": torch.arange(0, 400, 3)}, lambda: dgl.dataloading.LaborSampler(
        [3, 2], importance_sampling=1, layer_dependency=True, **HPF), {}),
    "hetero full, callable exclude": ("h", HEDGES, _edge_wise(
        lambda: dgl.dataloading.MultiLayerFullNeighborSampler(2, **HPF), ("PerSourceUniform", 2),
        exclude=lambda eids: {WRITTEN_BY: eids[WRITES]} if WRITES in eids else {}), {}),
    "hetero int32, reverse_id, PerSourceUniform": ("h32", {"cites": HEDGES["cites"].int()}, _edge_wise(
        lambda: _NS([3, 2], **HPF), ("PerSourceUniform", 2), exclude="reverse_id",
        reverse_eids={CITES: torch.arange(1600).flip(0).int()}, prefetch_labels={"cites": ["w"]}), {}),
    "a custom Sampler marking LazyFeatures": ("g", torch.arange(0, N_NODES, 3), lambda: LazyMarking([3, 2]), {}),
    "a custom Sampler marking LazyFeatures, workers": ("g", torch.arange(0, N_NODES, 3), lambda: LazyMarking([3, 2]),
                                                       {"num_workers": 2}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_dgls_batches_field_by_field(graphs, name):
    graph, indices, make, kw = CASES[name]
    ours = assert_dgls_batches(graphs[graph], indices, make, **{"batch_size": 20, "shuffle": True, **kw})
    assert len(ours) > 2


def test_every_dtype_arrives_as_the_graphs_rows(graphs):
    """Beyond equality with DGL: each prefetched column is the graph's rows of the sampled ids, in its dtype."""
    g = graphs["dtypes"]
    for input_nodes, output_nodes, blocks in assert_dgls_batches(g, *CASES["every dtype: nodes"][1:3], batch_size=40):
        for name in NODE_DTYPES:
            assert_same_bits(blocks[0].srcdata[name], g.ndata[name][input_nodes], name)
            assert_same_bits(blocks[-1].dstdata[name], g.ndata[name][output_nodes], name)
        for block in blocks:
            assert_same_bits(block.edata["e16"], g.edata["e16"][block.edata[dgl.EID]], "e16")


@pytest.mark.parametrize("batch_size", [np.int64(40), np.int32(40), torch.tensor(40)], ids=["np.int64", "np.int32",
                                                                                          "tensor"])
def test_integer_batch_sizes_that_are_not_ints_give_dgls_batches(graphs, batch_size):
    """DGL's DataLoader only counts and slices with batch_size: a numpy integer (a config read with numpy) or a 0-d
    integer tensor works there. The loader refused them ("batch_size=40 is not accepted; use an int >= 1")."""
    make = lambda: _NS([3, 2], prefetch_node_feats=["feat"], prefetch_labels=["label"])  # noqa: E731
    ours = assert_dgls_batches(graphs["g"], torch.arange(0, N_NODES, 3), make, batch_size=batch_size, shuffle=True)
    assert [len(b[1]) for b in ours] == [40, 40, 40, 40, 7]


@pytest.mark.parametrize("option", [dict(device_cache=1 << 12), dict(features="zero_copy")],
                         ids=["device_cache", "zero_copy"])
def test_served_features_on_a_graph_with_one_node_type_and_several_edge_types(graphs, option):
    """A cache ranks nodes by their appearances as edge sources; the loader read them with graph.edges(), which
    DGL refuses on a graph with several edge types ("Edge type name must be specified"), though the graph has one
    node type and the loader serves its features. Now the sources of every edge type count."""
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    g = graphs["relational"]
    make = lambda: _NS([3, 2], prefetch_node_feats=["feat"], prefetch_labels=["label"])  # noqa: E731
    seed_all(0)
    theirs = list(dgl.dataloading.DataLoader(g, torch.arange(0, 300, 3), make(), batch_size=20, shuffle=True))
    seed_all(0)
    loader = CompressedDGLDataLoader(g, torch.arange(0, 300, 3), make(), batch_size=20, shuffle=True, **option)
    ours = list(loader)
    assert len(ours) == len(theirs) == 5
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert_same_structure(a, b, f"batch {i}")
    assert ("device_cache" in loader.features.describe()) == ("device_cache" in option)


def test_node_ids_as_a_tensor_on_a_graph_with_several_node_types_are_refused_by_name(graphs):
    """DGL's samplers take {node type: ids} there and fail on the first batch ("Must specify node type"); the
    loader checked the tensor against the first node type's count instead, and said that an id was out of range
    ("indices contains node 252 ... outside [0, 250)": 250 authors), also for a sampler of the user's that reads
    the tensor as paper ids, which DGL's loader takes. An empty tensor is DGL's empty loader."""
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader as L

    h = graphs["h"]
    make = lambda: _NS([3, 2], **HPF)  # noqa: E731
    for ids in (torch.arange(0, 400, 3), torch.arange(10)):
        with pytest.raises(ValueError, match=r"^indices is a tensor of node ids, but the graph has 3 node types "
                                             r"\(\['author', 'field', 'paper'\]\); DGL's samplers take \{node type: "
                                             r"node ids\} there, e.g. indices=\{'author': ids\}"):
            L(h, ids, make())
    with pytest.raises(ValueError, match=r"^indices is a tensor of edge ids, but the graph has 5 edge types"):
        L(h, torch.arange(3), _edge_wise(make)())
    assert assert_dgls_batches(h, torch.arange(0), make, batch_size=20) == []
    assert assert_dgls_batches(h, torch.arange(0), _edge_wise(make), batch_size=20) == []
    # a sampler of the user's reads such a tensor as it likes (here: paper ids, past the 250 authors)
    ours = assert_dgls_batches(h, torch.arange(0, 400, 3), lambda: PaperSeeds([3, 2], **HPF), batch_size=40)
    assert torch.equal(torch.cat([b[1]["paper"] for b in ours]), torch.arange(0, 400, 3))


class PaperSeeds(dgl.dataloading.NeighborSampler if dgl is not None else object):
    """A NeighborSampler of the user's that takes a tensor of paper ids on a heterogeneous graph."""

    def sample_blocks(self, g, seed_nodes, exclude_eids=None):
        return super().sample_blocks(g, {"paper": seed_nodes}, exclude_eids)


def test_a_prefetch_name_given_as_a_string_is_refused_by_name(graphs):
    """DGL iterates a prefetch attribute: "feat" prefetches 'f', 'e', 'a', 't' (KeyError: 'f' on the first batch).
    The loader read it as ["feat"], set its codecs up for that, and failed in the workers alike. A one-character
    name iterates to itself: DGL's batches."""
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader as L

    g, h = graphs["g"], graphs["h"]
    with pytest.raises(TypeError, match=r"^graph_sampler.prefetch_node_feats='feat' is a string; DGL reads it as the "
                                        r"names \['f', 'e', 'a', 't'\], one per character: give a list, "
                                        r"graph_sampler.prefetch_node_feats=\['feat'\]"):
        L(g, torch.arange(10), _NS([2], prefetch_node_feats="feat"))
    with pytest.raises(TypeError, match=r"^graph_sampler.sampler.prefetch_labels\['paper'\]='label' is a string"):
        L(h, {"cites": torch.arange(10)}, _edge_wise(lambda: _NS([2], prefetch_labels={"paper": "label"}))())
    with pytest.raises(TypeError, match=r"^graph_sampler.prefetch_labels='score' is a string"):
        L(g, torch.arange(10), _edge_wise(lambda: _NS([2]), prefetch_labels="score")())
    g = make_graph(num_nodes=N_NODES, num_edges=N_EDGES)
    g.ndata["x"] = torch.randn(N_NODES, 2)
    ours = assert_dgls_batches(g, torch.arange(0, N_NODES, 3), lambda: _NS([2], prefetch_node_feats="x"), batch_size=40)
    assert_same_bits(ours[0][2][0].srcdata["x"], g.ndata["x"][ours[0][0]], "x")


@pytest.mark.parametrize("graph,indices,make,message", [
    ("g", torch.arange(0, N_NODES, 3).int(), "nodes",
     r"^indices is torch.int32, but the graph's idtype is torch.int64: DGL's samplers take node ids of the graph's "
     r"idtype \(they would refuse every batch\); use indices.long\(\), or graph.int\(\)"),
    ("g", torch.arange(0, N_NODES, 3).short(), "nodes", r"^indices is torch.int16, .*use indices.long\(\)$"),
    ("g", torch.arange(0, N_NODES, 3).numpy().astype(np.int32), "nodes", r"^indices is torch.int32"),
    ("g32", torch.arange(0, N_NODES, 3), "nodes",
     r"^indices is torch.int64, but the graph's idtype is torch.int32: .*use indices.int\(\), or graph.long\(\)"),
    ("g32", torch.arange(0, N_NODES, 3).tolist(), "nodes", r"^indices is torch.int64, but .* torch.int32"),
    ("g", torch.arange(0, N_EDGES, 7).int(), "edges", r"^indices is torch.int32, .*take edge ids of the graph's"),
    ("g32", torch.arange(0, N_EDGES, 7), "labor edges", r"^indices is torch.int64, .*take edge ids"),
    ("h", {"paper": torch.arange(0, 400, 3).int(), "author": torch.arange(5)}, "hetero nodes",
     r"^indices\['paper'\] \(DGL batches a dict's ids in the dtype of its first value\) is torch.int32, .*use "
     r"indices.long\(\) for each value, or graph.int\(\)"),
    ("h", {"cites": torch.arange(0, 1600, 20).int()}, "hetero edges", r"^indices\['cites'\] .* is torch.int32"),
], ids=["int32 on int64", "int16", "numpy int32", "int64 on int32", "list on int32", "edges int32 on int64",
        "labor edges int64 on int32", "hetero dict", "hetero edges dict"])
def test_seeds_of_another_dtype_than_the_graphs_idtype_are_refused_up_front(graphs, graph, indices, make, message):
    """DGL's samplers refuse every batch of such seeds, from the workers, at the first batch ("Expect argument
    "nodes["_N"]" to have data type torch.int64. But got torch.int32."); the loader let them through to that."""
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader as L

    g = graphs["g"].int() if graph == "g32" else graphs[graph]
    hetero = graph == "h"
    node_wise = (lambda: _NS([2], **HPF)) if hetero else (lambda: _NS([2], prefetch_node_feats=["feat"]))
    sampler = {"nodes": node_wise, "hetero nodes": node_wise, "edges": _edge_wise(node_wise),
               "hetero edges": _edge_wise(node_wise),
               "labor edges": _edge_wise(lambda: dgl.dataloading.LaborSampler([2]))}[make]()
    theirs = dgl.dataloading.DataLoader(g, indices, sampler, batch_size=40)
    with pytest.raises(dgl.DGLError, match="to have data type"):  # DGL: at the first batch
        next(iter(theirs))
    with pytest.raises(TypeError, match=message):
        L(g, indices, sampler, batch_size=40)


class CastingSampler(dgl.dataloading.NeighborSampler if dgl is not None else object):
    """A NeighborSampler of the user's that casts the seeds to the graph's idtype itself."""

    def sample_blocks(self, g, seed_nodes, exclude_eids=None):
        return super().sample_blocks(g, seed_nodes.to(g.idtype), exclude_eids)


def test_seeds_of_another_dtype_that_dgl_takes_give_its_batches(graphs):
    """Where DGL's loader takes such seeds the loader does too: a dict whose first value has the graph's idtype
    (DGL batches every type's ids in it), no seeds at all, and a sampler of the user's that casts them."""
    h, g = graphs["h"], graphs["g"]
    mixed = {"paper": torch.arange(0, 400, 3), "author": torch.arange(0, 250, 7).int()}
    ours = assert_dgls_batches(h, mixed, lambda: _NS([3, 2], **HPF), batch_size=40, shuffle=True)
    assert len(ours) == 5 and {ids.dtype for b in ours for ids in b[1].values()} == {torch.int64}
    assert assert_dgls_batches(g, torch.arange(0).int(), lambda: _NS([2], prefetch_node_feats=["feat"]),
                               batch_size=40) == []
    ours = assert_dgls_batches(g, torch.arange(0, N_NODES, 3).int(),
                               lambda: CastingSampler([3, 2], prefetch_node_feats=["feat"]), batch_size=40)
    assert len(ours) == 5 and ours[0][1].dtype == torch.int64  # cast by the sampler


class AnyStructure(dgl.dataloading.Sampler if dgl is not None else object):
    """A custom sampler returning a structure of its own, which DGL's loader takes as it is: a dict holding the
    blocks, a nested list with a second graph (a node subgraph, its features lazily sliced and one marked
    LazyFeature) and a LazyFeature of data attached to the loader (``attach_data``), fetched by DGL's prefetcher."""

    def __init__(self, fanouts):
        super().__init__()
        self.inner = dgl.dataloading.NeighborSampler(fanouts, prefetch_node_feats=["feat"], prefetch_labels=["label"])

    def sample(self, g, seed_nodes):
        input_nodes, output_nodes, blocks = self.inner.sample(g, seed_nodes)
        sub = dgl.node_subgraph(g, output_nodes)
        sub.ndata["x"] = dgl.LazyFeature("feat")
        return {"blocks": blocks, "more": [input_nodes, (sub, output_nodes)], "extra": dgl.LazyFeature("extra", output_nodes)}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_custom_samplers_own_structure_and_attached_data_are_dgls(graphs, num_workers):
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    g = graphs["g"]
    extra = torch.randn(N_NODES, 3, generator=torch.Generator().manual_seed(5))
    out = []
    for cls in (dgl.dataloading.DataLoader, CompressedDGLDataLoader):
        seed_all(0)
        loader = cls(g, torch.arange(0, N_NODES, 3), AnyStructure([3, 2]), batch_size=20, shuffle=True,
                     num_workers=num_workers)
        loader.attach_data("extra", extra)
        out.append(list(loader))
    theirs, ours = out
    assert len(ours) == len(theirs) > 2
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert_same_structure(a, b, f"batch {i}")
        sub, seeds = a["more"][1]
        assert_same_bits(sub.ndata["x"], g.ndata["feat"][sub.ndata[dgl.NID]], "x")
        assert_same_bits(a["extra"], extra[seeds], "extra")
        assert_same_bits(a["blocks"][0].srcdata["feat"], g.ndata["feat"][a["more"][0]], "feat")
