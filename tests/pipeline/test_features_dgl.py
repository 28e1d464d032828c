"""CompressedDGLDataLoader's feature modes and device cache on the CPU stand-in: the same batches as
DGL's own DataLoader, bit for bit. Marked `dgl` (run in .venv-dgl: `make test-dgl`)."""
import pytest
import torch

from tests.loaders.test_dgl import assert_same_batch, check_against_graph, dgl, make_graph, run, sampler

pytestmark = [pytest.mark.dgl, pytest.mark.filterwarnings("ignore:Dataloader CPU affinity")]
#: the slot map of 2000 nodes and a few hundred compressed rows
BUDGET = 2000 * 4 + 20_000


@pytest.fixture(scope="module")
def graph():
    if dgl is None:
        pytest.fail("these tests were selected (-m dgl) but dgl is not importable here")
    return make_graph()


@pytest.mark.parametrize("features,device_cache,num_workers", [
    ("zero_copy", 0, 0), ("zero_copy", BUDGET, 2), ("worker", BUDGET, 0), ("auto", 0, 0)])
def test_every_mode_gives_dgls_batches(graph, features, device_cache, num_workers):
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    idx = torch.arange(0, 2000, 2)
    theirs = run(dgl.dataloading.DataLoader, graph, idx, sampler, batch_size=128, shuffle=True,
                 num_workers=num_workers)
    loader_box = {}

    def make(*a, **kw):
        loader_box["loader"] = CompressedDGLDataLoader(*a, **kw)
        return loader_box["loader"]

    ours = run(make, graph, idx, sampler, batch_size=128, shuffle=True, num_workers=num_workers,
               features=features, device_cache=device_cache)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert_same_batch(a, b)
        check_against_graph(a, graph)
    loader = loader_box["loader"]
    s = loader.stats
    assert loader.features.mode == ("worker" if features == "auto" else features)
    if device_cache:
        assert s.cache_hits > 0 and s.cache_misses > 0 and s.cache["feat"]["rows"] > 0
    if loader.features.mode == "zero_copy":
        assert s.tier_bytes["zero_copy"] > 0
        assert "float32[16]" not in s.sent_bytes  # the workers sent ids, not feature rows


#: each of the two feature tables' (papers, authors) slot map and a few kB of compressed rows
HETERO_BUDGET = 2 * (400 * 4 + 3000)


@pytest.mark.parametrize("features,device_cache,num_workers", [
    ("zero_copy", 0, 0), ("zero_copy", HETERO_BUDGET, 2), ("worker", HETERO_BUDGET, 0)])
def test_a_heterogeneous_graph_takes_every_mode_with_dgls_batches(features, device_cache, num_workers):
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader
    from ibp_graph.pipeline.cache import degree_hotness
    from tests.loaders.test_dgl_hetero import (assert_same_hetero_batch, check_hetero_against_graph, hetero_sampler,
                                               make_hetero)

    if dgl is None:
        pytest.fail("these tests were selected (-m dgl) but dgl is not importable here")
    g = make_hetero()
    idx = {"paper": torch.arange(0, 400, 3)}
    kw = dict(batch_size=32, shuffle=True, num_workers=num_workers)
    theirs = run(dgl.dataloading.DataLoader, g, idx, hetero_sampler, **kw)
    box = {}

    def make(*a, **k):
        box["loader"] = CompressedDGLDataLoader(*a, **k)
        return box["loader"]

    ours = run(make, g, idx, hetero_sampler, features=features, device_cache=device_cache, **kw)
    assert len(ours) == len(theirs) == 5
    for a, b in zip(ours, theirs):
        assert_same_hetero_batch(a, b)
        check_hetero_against_graph(a, g)
    loader, s = box["loader"], box["loader"].stats
    assert loader.features.mode == features
    if features == "zero_copy":
        assert s.tier_bytes["zero_copy"] > 0 and "float32[32]" not in s.sent_bytes  # ids, not feature rows
    if device_cache:
        assert set(loader.features.caches) == {"paper/feat", "author/feat"}
        assert s.cache_hits > 0 and s.cache_misses > 0
        for t in ("paper", "author"):  # each type's hottest nodes, by its appearances as an edge source
            cache = loader.features.caches[f"{t}/feat"]
            counts = sum(degree_hotness(g.edges(etype=et)[0].numpy(), g.num_nodes(t))
                         for et in g.canonical_etypes if et[0] == t)
            held = cache.hot_mask.numpy()
            assert 0 < held.sum() < g.num_nodes(t) and s.cache[f"{t}/feat"]["budget_bytes"] == device_cache // 2
            assert counts[held].min() >= counts[~held].max()
