"""CompressedDGLDataLoader with node features served from pre-encoded stores (`node_stores`).

Workers gather compressed rows instead of encoding raw ones; batches stay DGL's own,
bit for bit, and the graph need not hold the raw table. Runs in .venv-dgl (`make test-dgl`).
"""
import pytest
import torch

from tests.loaders.test_dgl import assert_same_batch, assert_same_bits, make_graph, run, sampler, seed_all
from tests.loaders.test_dgl_hetero import assert_same_hetero_batch, hetero_sampler, make_hetero

pytestmark = [pytest.mark.dgl, pytest.mark.filterwarnings("ignore:Dataloader CPU affinity")]


@pytest.fixture(scope="module")
def dgl_mod():
    try:
        import dgl as mod
    except Exception:
        pytest.skip("dgl is not importable here (make test-dgl)")
    return mod


@pytest.fixture(scope="module")
def graph(dgl_mod):
    return make_graph()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_store_batches_equal_dgls_and_skip_encoding(dgl_mod, graph, num_workers):
    from ibp_graph.data.store import EncodedTable
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    table = EncodedTable.encode(graph.ndata["feat"], "ibp", progress=False)
    indices = torch.arange(0, 2000, 4)
    kw = dict(batch_size=64, shuffle=True, num_workers=num_workers)
    theirs = run(dgl_mod.dataloading.DataLoader, graph, indices, sampler, **kw)
    loader = CompressedDGLDataLoader(graph, indices, sampler(), codec="identity", node_stores={"feat": table}, **kw)
    seed_all(0)
    ours = list(loader)
    assert len(ours) == len(theirs) == 8
    for a, b in zip(ours, theirs):
        assert_same_batch(a, b)
    assert loader.codecs["feat@store"] is table.codec  # the store's own codec, not the loader's identity
    assert set(loader.stats.sent_bytes) == {"feat@store", "float32[*]"}
    assert loader.stats.sent_bytes["feat@store"] < loader.stats.raw_bytes["feat@store"]  # compressed rows sent


def test_the_graph_need_not_hold_a_stored_feature(dgl_mod, graph):
    """The raw table may be absent (too large for memory): rows come from the store alone; one store
    read by two slots (source features and destination labels) is gathered once, as one group."""
    from ibp_graph.data.store import EncodedTable
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    feat = graph.ndata["feat"]
    bare = dgl_mod.graph(graph.edges(), num_nodes=graph.num_nodes())
    bare.ndata["label"] = graph.ndata["label"]
    table = EncodedTable.encode(feat, "auto", progress=False)
    make = lambda: sampler(prefetch_node_feats=["feat"], prefetch_labels=["feat", "label"])  # noqa: E731
    indices = torch.arange(0, 2000, 7)
    theirs = run(dgl_mod.dataloading.DataLoader, bare, indices, lambda: sampler(prefetch_labels=["label"]),
                 batch_size=50, shuffle=True)
    loader = CompressedDGLDataLoader(bare, indices, make(), node_stores={"feat": table}, batch_size=50, shuffle=True)
    seed_all(0)
    ours = list(loader)
    assert len(ours) == len(theirs) == 6
    for (inp, out, blocks), (inp_b, out_b, blocks_b) in zip(ours, theirs):
        assert_same_bits(inp, inp_b, "input_nodes")
        assert_same_bits(blocks[0].srcdata["feat"], feat[inp], "srcdata feat")
        assert_same_bits(blocks[-1].dstdata["feat"], feat[out], "dstdata feat")
        assert_same_bits(blocks[-1].dstdata["label"], blocks_b[-1].dstdata["label"], "label")
    assert set(loader.stats.sent_bytes) == {"feat@store", "float32[*]"}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_hetero_store_for_one_type_next_to_raw_features_of_another(dgl_mod, num_workers):
    from ibp_graph.data.store import EncodedTable
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    hetero = make_hetero()
    table = EncodedTable.encode(hetero.nodes["paper"].data["feat"], "ebp", progress=False)
    indices = {"paper": torch.arange(0, 400, 3)}
    kw = dict(batch_size=32, shuffle=True, num_workers=num_workers)
    theirs = run(dgl_mod.dataloading.DataLoader, hetero, indices, hetero_sampler, **kw)
    loader = CompressedDGLDataLoader(hetero, indices, hetero_sampler(), node_stores={"paper": {"feat": table}},
                                     codec="ibp", **kw)
    seed_all(0)
    ours = list(loader)
    assert len(ours) == len(theirs) == 5
    for a, b in zip(ours, theirs):
        assert_same_hetero_batch(a, b)
    assert loader.codecs["paper/feat@store"].name == "ebp"
    assert set(loader.stats.sent_bytes) == {"paper/feat@store", "float32[32]", "float32[*]", "float32[2]"}


def test_store_errors_name_the_argument(dgl_mod, graph):
    from ibp_graph.data.store import EncodedTable
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader as L

    idx = torch.arange(10)
    with pytest.raises(TypeError, match=r"node_stores must be a dict of EncodedTables"):
        L(graph, idx, sampler(), node_stores=[1])
    with pytest.raises(ValueError, match=r"node_stores\['feat'\] has 10 rows; the graph has 2000"):
        L(graph, idx, sampler(), node_stores={"feat": EncodedTable.encode(graph.ndata["feat"][:10], "identity",
                                                                          progress=False)})
    with pytest.raises(ValueError, match=r"table for 'feat' holds torch.float16 \(2000, 16\); the graph's column "
                                         r"holds torch.float32 \(2000, 16\)"):
        L(graph, idx, sampler(), node_stores={"feat": EncodedTable.encode(graph.ndata["feat"].half(), "identity",
                                                                          progress=False)})
    with pytest.raises(KeyError, match=r"prefetches \['emb'\], not in graph.ndata .* nor in node_stores"):
        L(graph, idx, sampler(prefetch_node_feats=["emb"]))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_source_object_in_node_stores_gives_dgls_batches(dgl_mod, graph, num_workers):
    """Issue #20: node_stores takes a feature source (pipeline.sources) as it takes a store; a served one
    (zero-copy) is read by the main process, whatever `features=` says for the rest."""
    from ibp_graph.data.store import EncodedTable
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader
    from ibp_graph.pipeline.sources import ZeroCopySource

    source = ZeroCopySource(EncodedTable.encode(graph.ndata["feat"], "ibp", progress=False))
    indices = torch.arange(0, 2000, 4)
    kw = dict(batch_size=64, shuffle=True, num_workers=num_workers)
    theirs = run(dgl_mod.dataloading.DataLoader, graph, indices, sampler, **kw)
    loader = CompressedDGLDataLoader(graph, indices, sampler(), node_stores={"feat": source}, features="worker", **kw)
    seed_all(0)
    ours = list(loader)
    assert len(ours) == len(theirs) == 8
    for a, b in zip(ours, theirs):
        assert_same_batch(a, b)
    assert loader.features.serving.sources == {"feat": source}
    assert loader.stats.tier_bytes["zero_copy"] > 0 and "feat@store" not in loader.stats.sent_bytes
