"""The graph's features change while a CompressedDGLDataLoader runs: its batches stay DGL's.

DGL's loader reads a batch's prefetched features from the graph in the main process as the batch is
taken, so a column written back after each step (historical embeddings), replaced or written in place
between epochs, reaches the next batches as it is then. Ours reads them in its workers, from the copy of
the graph they started with: a column changed since they started is read again in the main process
(warned once), and persistent workers restart at the next epoch with the graph as it is. Every batch is
compared with DGL's, bit for bit, as the loop sees it. Runs in .venv-dgl (`make test-dgl`).
"""
import warnings

import pytest
import torch

from tests.loaders.test_dgl import assert_same_bits, dgl, make_graph, seed_all

pytestmark = [pytest.mark.dgl, pytest.mark.filterwarnings("ignore:Dataloader CPU affinity")]

CHANGED = "changed after the loader's workers started"


@pytest.fixture
def fresh():
    """A new graph each call, equal to the last (DGL's clone shares the feature tensors)."""
    if dgl is None:
        pytest.skip("dgl is not importable here (make test-dgl)")
    return lambda: make_graph(num_nodes=600, num_edges=4000, dim=8)


def _sampler():
    return dgl.dataloading.NeighborSampler([4, 3], prefetch_node_feats=["feat"], prefetch_labels=["label"],
                                           prefetch_edge_feats=["w"])


def _seen(batch) -> list:
    """What a training step reads of a batch, copied as the loop sees it (before the next change)."""
    inp, out, blocks = batch
    got = [inp, out, blocks[0].srcdata["feat"], blocks[-1].dstdata["label"]]
    return [t.clone() for t in got + [b.edata["w"] for b in blocks] + [b.srcdata[dgl.NID] for b in blocks]]


def _run(cls, g, change, epochs=2, match=CHANGED, **kw) -> tuple[list, list]:
    """Every batch's `_seen`, `change(g, epoch, step, batch)` applied after each step; the warnings (`match`)."""
    seed_all(0)
    loader = cls(g, torch.arange(0, 600, 3), _sampler(), batch_size=40, **kw)
    seen = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for epoch in range(epochs):
            for step, batch in enumerate(loader):
                seen.append(_seen(batch))
                change(g, epoch, step, batch)
    return seen, [str(w.message) for w in caught if match in str(w.message)]


def _write_back(g, epoch, step, batch):  # historical embeddings: this step's input nodes get new values
    g.ndata["feat"][batch[0]] = float(100 * epoch + step + 1)


def _replace_and_scale(g, epoch, step, batch):
    if step == 1:
        g.ndata["feat"] = g.ndata["feat"] * 2  # a new tensor
        g.edata["w"].mul_(3)  # in place


CHANGES = {"write back": _write_back, "replace and scale": _replace_and_scale}


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("workers", [dict(num_workers=0), dict(num_workers=1),
                                     dict(num_workers=1, persistent_workers=True)], ids=["0", "1", "persistent"])
def test_features_changed_between_steps_reach_the_batches_as_in_dgls_loader(fresh, change, workers):
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    theirs, _ = _run(dgl.dataloading.DataLoader, fresh(), CHANGES[change], **workers)
    ours, warned = _run(CompressedDGLDataLoader, fresh(), CHANGES[change], **workers)
    assert len(ours) == len(theirs) > 5
    for i, (a, b) in enumerate(zip(ours, theirs)):
        for j, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_bits(x, y, f"batch {i}, field {j}")
    if workers["num_workers"] == 0:  # sampled and gathered in this process, from the graph as it is
        assert warned == []
    else:  # once per loader for each changed column the workers read (node and edge columns alike)
        names = {"write back": ["nodes['_N'].data['feat']"],
                 "replace and scale": ["nodes['_N'].data['feat']", "edges[('_N', '_E', '_N')].data['w']"]}[change]
        assert sorted(w.split(" changed")[0] for w in warned) == sorted(f"graph.{n}" for n in names), warned


def test_persistent_workers_keep_their_copy_and_seeds_and_only_changed_columns_are_read_again(fresh):
    """Unchanged, epoch 2 is served by epoch 1's workers, compressed, without a warning; after a column is
    replaced between epochs the same workers go on (their random stream is DGL's), and only that column's
    rows are read again in the main process."""
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    seed_all(0)
    g = fresh()
    loader = CompressedDGLDataLoader(g, torch.arange(0, 600, 3), _sampler(), batch_size=40, num_workers=1,
                                     persistent_workers=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=f".*{CHANGED}")
        list(loader)
        pids = [w.pid for w in loader._iterator._workers]
        list(loader)
    label = g.ndata["label"]
    g.ndata["feat"] = g.ndata["feat"] + 1000
    with pytest.warns(UserWarning, match=r"graph.nodes\['_N'\].data\['feat'\] " + CHANGED) as caught:
        after = [(b[2][0].srcdata[dgl.NID], b[2][0].srcdata["feat"], b[2][-1].dstdata["label"]) for b in loader]
    assert [w.pid for w in loader._iterator._workers] == pids
    assert sum(CHANGED in str(w.message) for w in caught) == 1 and g.ndata["label"] is label
    for nid, feat, _ in after:
        assert_same_bits(feat, g.ndata["feat"][nid], "a replaced column's rows")


def test_a_column_removed_mid_epoch_is_left_out_as_dgl_leaves_it_and_a_prefetched_one_is_named(fresh):
    """DGL re-attaches a sampled graph's columns to the parent's storage only where the parent still has
    them; a removed column that the sampler prefetches is a KeyError in both loaders (ours names it)."""
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    def pop(key):
        return lambda g, epoch, step, batch: g.ndata.pop(key) if step == 0 else None

    for cls in (dgl.dataloading.DataLoader, CompressedDGLDataLoader):
        h = fresh()
        seen, _ = _run(cls, h, pop("year"), epochs=1, num_workers=1)  # "year": not prefetched
        assert len(seen) == 5 and "year" not in h.ndata
        with pytest.raises(KeyError, match=r"data\['feat'\], which the sampler prefetches, was removed"
                           if cls is CompressedDGLDataLoader else "feat"):
            _run(cls, fresh(), pop("feat"), epochs=1, num_workers=1)


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("option", [dict(features="zero_copy"), dict(device_cache=1 << 14, num_workers=1)],
                         ids=["zero_copy", "device_cache, workers"])
def test_features_the_loader_encoded_once_from_the_graph_still_follow_its_changes(fresh, change, option):
    """features="zero_copy" and device_cache= encode the graph's own column once, when the loader is built;
    a column changed since (in place or replaced) is read again from the graph, as DGL's loader reads it, not
    served stale from that copy (warned once)."""
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    theirs, _ = _run(dgl.dataloading.DataLoader, fresh(), CHANGES[change], num_workers=option.get("num_workers", 0))
    ours, warned = _run(CompressedDGLDataLoader, fresh(), CHANGES[change], match="changed after the loader encoded it",
                        **option)
    assert len(ours) == len(theirs) > 5
    for i, (a, b) in enumerate(zip(ours, theirs)):
        for j, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_bits(x, y, f"batch {i}, field {j}")
    assert sum("graph.nodes['_N'].data['feat']" in w for w in warned) == 1, warned
