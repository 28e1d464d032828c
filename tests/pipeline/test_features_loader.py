"""CompressedNeighborLoader's feature modes and device cache on the CPU stand-in: every batch equals
the worker path's, bit for bit, with workers or without; the stats count hits, misses and tiers."""
import pytest
import torch

from ibp_graph.data.checksums import ChecksumError
from ibp_graph.data.store import EncodedTable
from ibp_graph.loaders.pyg import CompressedNeighborLoader
from ibp_graph.pipeline.sources import StoreSource, TensorSource, ZeroCopySource

from tests.loaders.test_pyg import check_batch, make_graph

INPUT = torch.arange(0, 3000, 3)
KEYS = ("x", "y", "n_id", "e_id", "edge_index", "input_id", "edge_attr")
#: a budget holding the slot map and a few hundred of the 3000 rows
BUDGET = 3000 * 4 + 30_000


def batches(data, num_workers=0, raw=None, **kw):
    torch.manual_seed(0)
    loader = CompressedNeighborLoader(data, [5, 3], input_nodes=INPUT, batch_size=128, shuffle=True,
                                      num_workers=num_workers, **kw)
    out = list(loader)
    for b in out:
        check_batch(b, raw if raw is not None else data, INPUT)
    return loader, out


@pytest.fixture(scope="module")
def data():
    return make_graph()


@pytest.fixture(scope="module")
def reference(data):
    return batches(data, features="worker")[1]


def same(a, b):
    assert len(a) == len(b)
    for p, q in zip(a, b):
        for k in KEYS:
            assert torch.equal(p[k].view(torch.uint8) if p[k].dtype == torch.float32 else p[k],
                               q[k].view(torch.uint8) if q[k].dtype == torch.float32 else q[k]), k


@pytest.mark.parametrize("store", [None, "ibp", "ebp", "identity"])
@pytest.mark.parametrize("features,device_cache,num_workers", [
    ("zero_copy", 0, 0), ("zero_copy", BUDGET, 0), ("worker", BUDGET, 0), ("zero_copy", BUDGET, 2),
    ("worker", BUDGET, 2), ("auto", BUDGET, 0)])
def test_every_mode_gives_the_worker_paths_batches(data, reference, store, features, device_cache, num_workers):
    raw = data
    if store is not None:
        data = data.clone()
        data.x = EncodedTable.encode(data.x, store, progress=False)
    loader, got = batches(data, num_workers, raw, features=features,
                          device_cache=device_cache)
    same(reference, got)
    s = loader.stats
    rows = sum(b.n_id.numel() for b in got)
    mode = "worker" if features == "auto" else features  # auto on the CPU: worker
    assert loader.features.mode == mode
    if device_cache:
        assert s.cache_hits + s.cache_misses == rows and 0 < s.hit_rate < 1
        assert s.tier_bytes["device_cache"] > 0 and s.cache["x"]["rows"] > 0
        assert f"{s.cache['x']['rows']:,} of 3,000 rows compressed" in loader.describe()
    if mode == "zero_copy":
        assert "x@store" not in s.sent_bytes and "float32[24]" not in s.sent_bytes  # no feature rows sent
        assert s.tier_bytes["zero_copy"] > 0 and s.tier_bytes["worker"] == 0
    else:
        assert s.tier_bytes["zero_copy"] == 0
        assert s.tier_bytes["worker"] == s.sent_bytes["x@store"]  # the misses the workers sent
    assert "device cache hit rate" in s.table()


def test_loader_arguments_are_checked(data):
    with pytest.raises(ValueError, match=r"features='gpu' is not accepted; use one of \('worker', "
                                         r"'zero_copy', 'auto'\)"):
        CompressedNeighborLoader(data, [2], batch_size=8, features="gpu")
    with pytest.raises(ValueError, match=r"device_cache=-5 is not accepted"):
        CompressedNeighborLoader(data, [2], batch_size=8, device_cache=-5)
    with pytest.raises(ValueError, match=r"device_cache=100 bytes cannot hold the slot map of 3,000 nodes"):
        CompressedNeighborLoader(data, [2], batch_size=8, device_cache=100)


def test_default_is_auto_and_worker_on_the_cpu(data):
    loader = CompressedNeighborLoader(data, [2], batch_size=8)
    assert loader.features.mode == "worker" and loader.features.serving is None
    assert "features=worker" in loader.describe()


# ---- issue 19: every read path verifies the store's chunks before it decodes a row of them ------------------
def damaged(data, tmp_path, codec="ibp", row=1700):
    """`data` with x a store opened with verify="sample" past one flipped byte of row `row`; (data, chunk)."""
    from tests.faults.test_store_faults import flip_row_byte, open_past_the_sample, rechecksum

    d = tmp_path / "x"
    EncodedTable.encode(data.x, codec, directory=d, progress=False)
    rechecksum(d, chunk_bytes=1024)
    chunk = flip_row_byte(d, row)
    out = data.clone()
    out.x = open_past_the_sample(d)
    return out, chunk


@pytest.mark.parametrize("codec", ["ibp", "identity"])
@pytest.mark.parametrize("features,device_cache,num_workers", [
    ("worker", 0, 0), ("worker", 0, 2), ("zero_copy", 0, 0), ("zero_copy", 0, 2), ("zero_copy", BUDGET, 0),
    ("worker", BUDGET, 2)])
def test_no_batch_decodes_a_row_of_a_damaged_chunk(data, tmp_path, codec, features, device_cache, num_workers):
    bad, chunk = damaged(data, tmp_path, codec)
    seeds = torch.cat([torch.tensor([1700]), INPUT])  # the damaged row is a seed of the first batch
    with pytest.raises(ChecksumError, match=rf"payload.bin: checksum differs in chunk\(s\) {chunk} .*needed by row"):
        list(CompressedNeighborLoader(bad, [5, 3], input_nodes=seeds, batch_size=128, features=features,
                                      device_cache=device_cache, num_workers=num_workers))


def test_chunks_the_workers_verified_are_verified_for_the_main_process(data, tmp_path):
    from tests.faults.test_store_faults import rechecksum

    d = tmp_path / "x"
    EncodedTable.encode(data.x, "ibp", directory=d, progress=False)
    rechecksum(d, chunk_bytes=1024)
    store = data.clone()
    store.x = EncodedTable.load(d)
    assert not bool(store.x.guard.verified.all())
    loader = CompressedNeighborLoader(store, [2], input_nodes=torch.arange(3000), batch_size=256, num_workers=2)
    for b in loader:  # every row is a seed once: the workers gather all of them
        check_batch(b, data, torch.arange(3000))
    assert bool(store.x.guard.verified.all())


# ---- issue 20: one feature-source interface; a source object is accepted wherever a table is -------------
class CountingSource(TensorSource):
    """A user's own source: raw rows of a tensor, counting the rows it was asked for."""

    def __init__(self, tensor):
        super().__init__(tensor)
        self.rows_read = 0

    def read(self, ids, into=None):
        self.rows_read += int(ids.numel())
        return super().read(ids, into)


def test_a_source_object_given_as_a_node_table_gives_the_same_batches(data, reference):
    store = EncodedTable.encode(data.x, "ibp", progress=False)
    for source, tier in ((ZeroCopySource(store), "zero_copy"), (StoreSource(store), "worker")):
        given = data.clone()
        given.x = source
        loader, got = batches(given, 0, data, features="worker")
        same(reference, got)
        assert loader.features.node_attrs["x"] is source and loader.features.mode == "worker"
        assert loader.stats.tier_bytes["zero_copy"] > 0 if tier == "zero_copy" else "x@store" in loader.stats.sent_bytes
    given = data.clone()
    given.x = mine = CountingSource(data.x)
    loader, got = batches(given, 0, data, features="worker")
    same(reference, got)
    assert mine.rows_read == sum(b.n_id.numel() for b in got)  # every row came through it


def test_tensor_names_carry_no_control_data(data, reference):
    """An attribute whose name looks like anything (here the old ids marker) is just an attribute."""
    odd = data.clone()
    odd["y@ids:x"] = data.y
    loader, got = batches(odd, 0, data, features="zero_copy")
    same(reference, got)
    for b in got:
        assert torch.equal(b["y@ids:x"], data.y[b.n_id])


def _written_back(data, features, device_cache, hetero=False, epochs=2, **extra):
    """Every batch's feature rows over two epochs, the table written back in place after each batch (historical
    embeddings: the batch's nodes get new values); the warnings about it."""
    import warnings

    data = data.clone()
    table = data["paper"].x if hetero else data.x
    kw = dict(input_nodes=("paper", None)) if hetero else dict(input_nodes=INPUT)
    torch.manual_seed(0)
    loader = CompressedNeighborLoader(data, [5, 3], batch_size=128, shuffle=True, features=features,
                                      device_cache=device_cache, **kw, **extra)
    seen = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(epochs):
            for b in loader:
                store = b["paper"] if hetero else b
                seen.append(store.x.clone())
                assert torch.equal(store.x, table[store.n_id])  # the rows as they are when the batch is taken
                table[store.n_id[:store.batch_size]] += 1.0
    return seen, [str(w.message) for w in caught if "changed after the loader encoded it" in str(w.message)]


@pytest.mark.parametrize("hetero", [False, True], ids=["Data", "HeteroData"])
@pytest.mark.parametrize("features,device_cache,workers", [("zero_copy", 0, {}), ("worker", BUDGET, {}),
                                                           ("zero_copy", BUDGET, {}),
                                                           ("zero_copy", BUDGET, dict(num_workers=1,
                                                                                      multiprocessing_context="spawn",
                                                                                      epochs=1))],
                         ids=["zero_copy", "cache", "zero_copy+cache", "spawned worker"])
def test_a_table_the_loader_encoded_follows_writes_in_place_as_the_worker_path(data, features, device_cache, workers,
                                                                               hetero):
    """features="zero_copy" and device_cache= encode a raw table once, when the loader is built; the table written
    in place afterwards (historical embeddings written back after each step) reaches the batches as on the worker
    path without workers (read from the table when the batch is taken), not served stale from that copy: warned
    once, naming it. With (spawned) workers too: the main process serves the rows, a worker follows nothing."""
    if hetero:
        from torch_geometric.data import HeteroData

        h = HeteroData()
        h["paper"].x, h["paper", "cites", "paper"].edge_index = data.x, data.edge_index
        data = h
    ours, warned = _written_back(data, features, device_cache, hetero, **workers)
    theirs, none = _written_back(data, "worker", 0, hetero, epochs=workers.get("epochs", 2))
    assert len(ours) == len(theirs) >= 8 and not none
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), i
    name = "data['paper'].x" if hetero else "data.x"
    assert len(warned) == 1 and warned[0].startswith(f"{name} changed after the loader encoded it"), warned
