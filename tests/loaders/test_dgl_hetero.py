"""CompressedDGLDataLoader on heterogeneous graphs and with pre-encoded node stores: DGL's own batches.

Papers, authors and fields with five edge types; papers and authors carry float32[32]
features (one group across both types), papers labels, citations an edge feature,
fields nothing. Every batch is compared with DGL's own DataLoader field by field: per
node type the source and destination nodes and all their columns, per edge type the
edges and all their columns. Runs in .venv-dgl (`make test-dgl`).
"""
import os

import pytest
import torch

from tests.loaders.test_dgl import assert_same_bits, run, seed_all

os.environ.setdefault("DGLBACKEND", "pytorch")
try:
    import dgl
except Exception:  # not installed, or installed for another torch
    dgl = None

pytestmark = [pytest.mark.dgl, pytest.mark.filterwarnings("ignore:Dataloader CPU affinity")]

SIZES = {"paper": 400, "author": 250, "field": 12}
DIM = 32


def make_hetero(seed=0):
    """A small ogbn-mag-like graph whose features name their node (feat[i, 0] == i), with -0.0 and NaN."""
    g_ = torch.Generator().manual_seed(seed)

    def edges(src, dst, n):
        return (torch.randint(0, SIZES[src], (n,), generator=g_), torch.randint(0, SIZES[dst], (n,), generator=g_))

    writes = edges("author", "paper", 900)
    g = dgl.heterograph({
        ("author", "writes", "paper"): writes,
        ("paper", "written_by", "author"): (writes[1], writes[0]),
        ("paper", "cites", "paper"): edges("paper", "paper", 1600),
        ("paper", "has_topic", "field"): edges("paper", "field", 500),
        ("field", "topic_of", "paper"): edges("field", "paper", 500),
    }, num_nodes_dict=SIZES)
    for ntype, shift in (("paper", 0.0), ("author", 0.5)):
        n = SIZES[ntype]
        feat = torch.arange(n, dtype=torch.float32).unsqueeze(1).repeat(1, DIM)
        feat[:, 1:] = shift + torch.randint(0, 4, (n, DIM - 1), generator=g_).float() * 0.25  # compressible
        feat[::7, 2] = -0.0
        g.nodes[ntype].data["feat"] = feat
    label = torch.randint(0, 5, (SIZES["paper"],), generator=g_).float()
    label[::3] = float("nan")
    g.nodes["paper"].data["label"] = label
    g.nodes["paper"].data["year"] = torch.randint(1990, 2021, (SIZES["paper"],), generator=g_)
    g.edges["cites"].data["w"] = torch.rand(g.num_edges("cites"), 2, generator=g_)
    return g


def hetero_sampler(fanouts=(3, 2), **prefetch):
    prefetch = prefetch or {"prefetch_node_feats": {"paper": ["feat"], "author": ["feat"]},
                            "prefetch_labels": {"paper": ["label"]},
                            "prefetch_edge_feats": {"cites": ["w"]}}
    return dgl.dataloading.NeighborSampler(list(fanouts), **prefetch)


def assert_same_graph(a, b, where: str) -> None:
    """Two sampled (hetero) graphs or blocks: nodes, edges and every column, per type, bit for bit."""
    assert a.srctypes == b.srctypes and a.dsttypes == b.dsttypes and a.canonical_etypes == b.canonical_etypes
    for side in ("srcnodes", "dstnodes"):
        for t in getattr(a, "srctypes" if side == "srcnodes" else "dsttypes"):
            da, db = getattr(a, side)[t].data, getattr(b, side)[t].data
            assert len(getattr(a, side)[t]) == len(getattr(b, side)[t]), (where, side, t)
            assert list(da.keys()) == list(db.keys()), (where, side, t, list(da.keys()), list(db.keys()))
            for key in da.keys():
                assert_same_bits(da[key], db[key], f"{where}.{side}[{t!r}].data[{key!r}]")
    for et in a.canonical_etypes:
        for x, y, name in zip(a.edges(etype=et), b.edges(etype=et), ("src", "dst")):
            assert_same_bits(x, y, f"{where} {et} {name}")
        da, db = a.edges[et].data, b.edges[et].data
        assert list(da.keys()) == list(db.keys()), (where, et)
        for key in da.keys():
            assert_same_bits(da[key], db[key], f"{where}.edges[{et}].data[{key!r}]")


def assert_same_hetero_batch(ours, theirs) -> None:
    (in_a, out_a, blocks_a), (in_b, out_b, blocks_b) = ours, theirs
    for x, y, what in ((in_a, in_b, "input_nodes"), (out_a, out_b, "output_nodes")):
        assert sorted(x) == sorted(y), what
        for t in x:
            assert_same_bits(x[t], y[t], f"{what}[{t!r}]")
    assert len(blocks_a) == len(blocks_b)
    for i, (a, b) in enumerate(zip(blocks_a, blocks_b)):
        assert_same_graph(a, b, f"blocks[{i}]")


def check_hetero_against_graph(batch, g) -> None:
    """Features and labels are the graph's rows of the sampled ids; the features name their node."""
    input_nodes, output_nodes, blocks = batch
    for t in ("paper", "author"):
        feat = blocks[0].srcnodes[t].data["feat"]
        assert_same_bits(feat, g.nodes[t].data["feat"][input_nodes[t]], f"{t} feat")
        assert torch.equal(feat[:, 0].long(), input_nodes[t])
    assert "feat" not in blocks[0].srcnodes["field"].data  # fields have no features
    assert_same_bits(blocks[-1].dstnodes["paper"].data["label"], g.nodes["paper"].data["label"][output_nodes["paper"]],
                     "label")
    for block in blocks:
        assert_same_bits(block.edges["cites"].data["w"],
                         g.edges["cites"].data["w"][block.edges["cites"].data[dgl.EID]], "w")


@pytest.fixture(scope="module")
def hetero():
    if dgl is None:
        pytest.skip("dgl is not importable here (make test-dgl)")
    return make_hetero()


@pytest.mark.parametrize("num_workers,codec", [(0, "identity"), (0, "auto"), (2, "identity"), (2, "auto")])
def test_hetero_batches_equal_dgls_own_dataloader(hetero, num_workers, codec):
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    indices = {"paper": torch.arange(0, 400, 3)}
    kw = dict(batch_size=32, shuffle=True, num_workers=num_workers)
    theirs = run(dgl.dataloading.DataLoader, hetero, indices, hetero_sampler, **kw)
    loader = CompressedDGLDataLoader(hetero, indices, hetero_sampler(), codec=codec, **kw)
    seed_all(0)
    ours = list(loader)
    assert len(ours) == len(theirs) == 5
    for a, b in zip(ours, theirs):
        assert_same_hetero_batch(a, b)
        check_hetero_against_graph(a, hetero)
    assert torch.equal(torch.cat([b[1]["paper"] for b in ours]).sort().values, indices["paper"])
    # paper and author features share one group (float32 rows of 32), hence one codec
    assert set(loader.codecs) == {"float32[32]", "float32[*]", "float32[2]", "int64[*]"}
    assert set(loader.stats.sent_bytes) == {"float32[32]", "float32[*]", "float32[2]"}
    if codec == "identity":
        assert loader.stats.fraction == 1.0
    else:
        assert loader.stats.sent_bytes["float32[32]"] < loader.stats.raw_bytes["float32[32]"]
    other = run(CompressedDGLDataLoader, hetero, indices, hetero_sampler, seed=1, codec=codec, **kw)
    assert not torch.equal(other[0][1]["paper"], ours[0][1]["paper"])  # the equality above is not vacuous


def test_hetero_per_edge_type_fanouts_and_several_seed_types(hetero):
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    fanouts = [{"writes": 2, "written_by": 1, "cites": 3, "has_topic": 1, "topic_of": 0},
               {"writes": 1, "written_by": 2, "cites": 2, "has_topic": 1, "topic_of": 2}]
    make = lambda: dgl.dataloading.NeighborSampler(  # noqa: E731
        fanouts, prefetch_node_feats={"paper": ["feat", "year"], "author": ["feat"]},
        prefetch_labels={"paper": ["label"], "author": ["feat"]}, prefetch_edge_feats={("paper", "cites", "paper"): ["w"]})
    indices = {"paper": torch.arange(0, 400, 5), "author": torch.arange(0, 250, 7)}
    theirs = run(dgl.dataloading.DataLoader, hetero, indices, make, batch_size=40, shuffle=True)
    ours = run(CompressedDGLDataLoader, hetero, indices, make, batch_size=40, shuffle=True, codec="auto")
    assert len(ours) == len(theirs) > 2
    for a, b in zip(ours, theirs):
        assert_same_hetero_batch(a, b)
        assert "feat" in a[2][-1].dstnodes["author"].data


def test_hetero_errors_name_the_argument(hetero):
    from ibp_graph.data.store import EncodedTable
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader as L

    idx = {"paper": torch.arange(10)}
    with pytest.raises(ValueError, match=r"prefetch_labels=\['label'\] is a list, but the graph has 3 node types"):
        L(hetero, idx, hetero_sampler(prefetch_labels=["label"]))
    with pytest.raises(ValueError, match=r"prefetch_edge_feats=\['w'\] is a list, but the graph has 5 edge types"):
        L(hetero, idx, hetero_sampler(prefetch_edge_feats=["w"]))
    with pytest.raises(KeyError, match="names node type 'venue'"):
        L(hetero, idx, hetero_sampler(prefetch_node_feats={"venue": ["feat"]}))
    with pytest.raises(ValueError, match="features='gpu' is not accepted"):
        L(hetero, idx, hetero_sampler(), features="gpu")
    with pytest.raises(KeyError, match="names edge type 'likes'"):
        L(hetero, idx, hetero_sampler(prefetch_edge_feats={"likes": ["w"]}))
    with pytest.raises(KeyError, match=r"prefetches \['feat'\], not in graph.nodes\['field'\].data"):
        L(hetero, idx, hetero_sampler(prefetch_node_feats={"field": ["feat"]}))
    table = EncodedTable.encode(hetero.nodes["paper"].data["feat"], "ibp", progress=False)
    with pytest.raises(ValueError, match=r"node_stores\['feat'\] is not a dict per node type"):
        L(hetero, idx, hetero_sampler(), node_stores={"feat": table})
    with pytest.raises(ValueError, match=r"node_stores\['author'\]\['feat'\] has 400 rows; the graph has 250"):
        L(hetero, idx, hetero_sampler(), node_stores={"author": {"feat": table}})
    with pytest.raises(TypeError, match=r"node_stores\['paper'\]\['feat'\] must be an EncodedTable"):
        L(hetero, idx, hetero_sampler(), node_stores={"paper": {"feat": hetero.nodes["paper"].data["feat"]}})
    with pytest.raises(ValueError, match=r"node_stores has \['paper/year'\], which graph_sampler does not prefetch"):
        L(hetero, idx, hetero_sampler(), node_stores={"paper": {"year": EncodedTable.encode(
            hetero.nodes["paper"].data["year"].unsqueeze(1), "identity", progress=False)}})
