"""CompressedNeighborLoader's feature modes and device cache on a HeteroData, on the CPU stand-in: every
batch equals the worker path's bit for bit (raw tables or stores, with workers or without, node and link
loaders), each type's cache holds that type's nodes most often drawn as neighbours, and the stats count
hits, misses and tiers per table."""
import numpy as np
import pytest
import torch

from ibp_graph.data.store import EncodedTable
from ibp_graph.loaders.pyg import CompressedLinkNeighborLoader, CompressedNeighborLoader
from ibp_graph.pipeline.cache import degree_hotness
from ibp_graph.pipeline.sources import CachedSource, ZeroCopySource

from tests.loaders.test_pyg_hetero import CITES, REV, WRITES, check_batch, make_hetero, same

#: holds each feature table's slot map (900 papers, 1200 authors) and a few hundred of its rows
BUDGET = 2 * ((900 + 1200) * 4 + 20_000)
KW = dict(num_neighbors=[4, 3], input_nodes=("paper", torch.arange(0, 900, 2)), batch_size=90, shuffle=True)


def run(data, num_workers=0, raw=None, **kw):
    torch.manual_seed(0)
    loader = CompressedNeighborLoader(data, device="cpu", num_workers=num_workers, **KW, **kw)
    out = list(loader)
    for b in out:
        check_batch(b, raw if raw is not None else data, {e: KW["num_neighbors"] for e in data.edge_types},
                    KW["input_nodes"][1])
    return loader, out


@pytest.fixture(scope="module")
def graph_and_reference():
    """The graph and the worker path's batches of it, which every mode must give."""
    graph = make_hetero()
    return graph, run(graph, features="worker")[1]


@pytest.fixture(scope="module")
def data(graph_and_reference):
    return graph_and_reference[0]


@pytest.mark.parametrize("store", [None, "ebp"])
@pytest.mark.parametrize("features,device_cache,num_workers", [
    ("zero_copy", 0, 0), ("zero_copy", BUDGET, 0), ("worker", BUDGET, 0), ("zero_copy", BUDGET, 2),
    ("worker", BUDGET, 2), ("auto", BUDGET, 0)])
def test_every_mode_gives_the_worker_paths_batches(graph_and_reference, store, features, device_cache, num_workers):
    data, reference = graph_and_reference
    given = data
    if store is not None:
        given = data.clone()
        given["paper"].x = EncodedTable.encode(data["paper"].x, store, progress=False)
    loader, got = run(given, num_workers, data, features=features, device_cache=device_cache)
    same(reference, got)
    mode = "worker" if features == "auto" else features  # auto on the CPU: worker
    assert loader.features.mode == mode
    sources = loader.features.node_attrs
    s = loader.stats
    if device_cache:
        assert set(loader.features.caches) == {"paper.x", "author.x"}
        assert all(isinstance(sources[n], CachedSource) for n in ("paper.x", "author.x"))
        rows = sum(b[t].n_id.numel() for b in got for t in ("paper", "author"))
        assert s.cache_hits + s.cache_misses == rows and 0 < s.hit_rate < 1
        for n in ("paper.x", "author.x"):
            c = s.cache[n]  # the budget is shared equally
            assert c["rows"] > 0 and c["budget_bytes"] == BUDGET // 2
            assert c["map_bytes"] + c["rows_bytes"] <= BUDGET // 2
        assert s.tier_bytes["device_cache"] > 0
    if mode == "zero_copy":
        # no feature rows sent by the workers (16-d rows, raw or stored): only ids, labels, masks, edge rows
        assert not any(s.sent_bytes[k] for k in s.sent_bytes if "[16]" in k or "@store" in k), s.sent_bytes
        assert s.tier_bytes["zero_copy"] > 0 and s.tier_bytes["worker"] == 0
        if not device_cache:
            assert isinstance(sources["paper.x"], ZeroCopySource) and isinstance(sources["author.x"], ZeroCopySource)
    else:
        assert s.tier_bytes["zero_copy"] == 0


def test_each_types_cache_holds_its_nodes_most_drawn_as_neighbours(data):
    small = 2 * (1200 * 4 + 1500)  # each table's slot map and ~1.5 kB of rows: a part of either type's rows
    loader = CompressedNeighborLoader(data, device="cpu", features="worker", device_cache=small, **KW)
    caches = loader.features.caches
    # a paper is drawn through the edge types leaving paper (cites, rev_writes); an author through writes, aff
    counts = {"paper": degree_hotness(data[CITES].edge_index[0], 900) + degree_hotness(data[REV].edge_index[0], 900),
              "author": degree_hotness(data[WRITES].edge_index[0], 1200)
              + degree_hotness(data[("author", "aff", "inst")].edge_index[0], 1200)}
    for t, n in (("paper", 900), ("author", 1200)):
        cache = caches[f"{t}.x"]
        held = np.flatnonzero(cache.hot_mask.numpy())
        assert 0 < held.size < n
        others = np.setdiff1d(np.arange(n), held)
        assert counts[t][held].min() >= counts[t][others].max()  # the hottest of its own type, by its own edges


def test_the_link_loader_takes_the_modes_too(data):
    kw = dict(num_neighbors=[3, 2], edge_label_index=CITES, batch_size=200, shuffle=True, neg_sampling="binary",
              device="cpu")
    torch.manual_seed(0)
    want = list(CompressedLinkNeighborLoader(data, features="worker", **kw))
    for option in (dict(features="zero_copy"), dict(features="zero_copy", device_cache=BUDGET),
                   dict(features="worker", device_cache=BUDGET)):
        torch.manual_seed(0)
        loader = CompressedLinkNeighborLoader(data, **option, **kw)
        got = list(loader)
        same(want, got)
        for b in got:
            for t in ("paper", "author"):
                assert torch.equal(b[t].x, data[t].x[b[t].n_id])
        assert loader.stats.tier_bytes["zero_copy" if "zero_copy" in option.values() else "device_cache"] > 0


def test_a_budget_too_small_for_the_slot_maps_is_refused_by_name(data):
    with pytest.raises(ValueError, match=r"device_cache=8000 \(8,000 bytes\) is shared by 2 tables, 4,000 bytes each, "
                                         r"which cannot hold the slot map of 'author.x' \(1,200 nodes\) \(4 B per "
                                         r"node\); accepted: 0 \(no cache\) or >= 9,600 bytes"):
        CompressedNeighborLoader(data, device="cpu", device_cache=8000, **KW)
    with pytest.raises(ValueError, match=r"device_cache=2000 \(2,000 bytes\) .* slot map of 'paper.x' \(900 nodes\), "
                                         r"'author.x' \(1,200 nodes\)"):
        CompressedNeighborLoader(data, device="cpu", device_cache=2000, **KW)
