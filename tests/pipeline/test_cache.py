"""The compressed device cache on the CPU stand-in: budget, which rows, capacity math, the index mapping."""
import numpy as np
import pytest
import torch

from ibp_graph.data.store import EncodedTable
from ibp_graph.pipeline import cache as C
from ibp_graph.pipeline.cache import DeviceCache, cache_budget, count_hotness, degree_hotness
from ibp_graph.pipeline.sources import CachedSource, StoreSource

CPU = torch.device("cpu")


def table(n=500, dim=16, codec="ibp", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.arange(n, dtype=torch.float32).unsqueeze(1).repeat(1, dim)
    x[:, 1:] += (torch.randn(n, dim - 1, generator=g) * 0.1).half().float()
    return x, EncodedTable.encode(x, codec, progress=False)


def hotness(n, seed=1):
    return np.random.default_rng(seed).permutation(n)  # distinct scores: a strict ranking


@pytest.mark.parametrize("value,want", [(0, 0), (12345, 12345), (0.5, None), (1.0, None)])
def test_budget_is_bytes_or_a_fraction_of_device_memory(value, want):
    got = cache_budget(value, CPU)
    assert got == (want if want is not None else int(value * C.device_memory(CPU)))


@pytest.mark.parametrize("value", [-1, 0.0, 1.5, -0.2, True, "1GB", None])
def test_bad_budgets_name_the_argument_and_what_is_accepted(value):
    with pytest.raises((TypeError, ValueError), match=r"device_cache=.* is not accepted; use an int number "
                                                      r"of bytes >= 0 .* or a float fraction in \(0, 1\]"):
        cache_budget(value, CPU)


def test_a_budget_below_the_slot_map_is_refused():
    _, t = table(100)
    with pytest.raises(ValueError, match=r"device_cache=399 bytes cannot hold the slot map of 100 nodes.*"
                                         r">= 400 bytes"):
        DeviceCache(t, hotness(100), 399, CPU)


@pytest.mark.parametrize("codec", ["ibp", "ebp", "identity"])
def test_the_hottest_rows_that_fit_are_cached_and_capacity_is_stated(codec):
    n = 500
    x, t = table(n, codec=codec)
    hot = hotness(n)
    budget = n * C.SLOT_BYTES + 6000
    c = DeviceCache(t, hot, budget, CPU)
    cap = c.capacity
    order = np.argsort(-hot, kind="stable")
    cached = torch.nonzero(c.slots >= 0).reshape(-1).numpy()
    assert sorted(cached) == sorted(order[:cap.rows])  # a prefix of the ranking
    assert 0 < cap.rows < n
    assert cap.map_bytes == n * C.SLOT_BYTES
    assert cap.map_bytes + cap.rows_bytes <= budget
    assert cap.raw_rows == (budget - cap.map_bytes) // (16 * 4)
    if codec == "identity":
        assert cap.rows <= cap.raw_rows
    else:  # compressed rows: more fit than raw ones
        assert cap.rows > cap.raw_rows and cap.gain > 1
    # the next hottest row would not have fit
    lengths = t.compressed.row_lengths().numpy()[order]
    per_row = lengths + (0 if t.compressed.offsets is None else 8)
    assert per_row[:cap.rows + 1].sum() > budget - cap.map_bytes - 32
    assert f"{cap.rows:,} of {n:,} rows compressed" in repr(c)


def test_zero_budget_caches_nothing():
    _, t = table(50)
    c = DeviceCache(t, hotness(50), 0, CPU)
    assert c.capacity.rows == 0 and not bool((c.slots >= 0).any())


@pytest.mark.parametrize("codec", ["ibp", "ebp", "identity"])
def test_split_maps_every_id_to_its_row_and_hits_decode_exactly(codec):
    n = 400
    x, t = table(n, codec=codec)
    c = DeviceCache(t, hotness(n), n * 4 + 8000, CPU)
    ids = torch.randint(0, n, (1000,), generator=torch.Generator().manual_seed(3))
    hit_pos, slots, miss_pos = c.split(ids)
    assert hit_pos.numel() + miss_pos.numel() == ids.numel()
    assert torch.equal(torch.sort(torch.cat([hit_pos, miss_pos])).values, torch.arange(ids.numel()))
    assert bool((c.slots[ids[hit_pos]] >= 0).all()) and bool((c.slots[ids[miss_pos]] < 0).all())
    assert hit_pos.numel() > 0 and miss_pos.numel() > 0
    hits = c.decode(slots)
    assert torch.equal(hits.view(torch.int32), x[ids[hit_pos]].view(torch.int32))  # bit for bit
    assert int(c.hit_bytes(slots)) == int(t.compressed.row_lengths()[ids[hit_pos]].sum())


def test_a_cached_source_gives_the_workers_only_what_the_cache_lacks():
    n = 300
    x, t = table(n)
    c = DeviceCache(t, hotness(n), n * 4 + 3000, CPU)
    ids = torch.randint(0, n, (500,), generator=torch.Generator().manual_seed(4))
    source, rest = CachedSource(StoreSource(t), c).worker_rows(ids)
    misses = source.read(rest)
    _, _, miss_pos = c.split(ids)
    assert misses.n_rows == miss_pos.numel()
    assert torch.equal(t.codec.decode(misses), x[ids[miss_pos]])  # in sampled order


def test_hotness_from_degree_and_from_counted_batches():
    indices = np.array([3, 3, 1, 0, 3, 1], dtype=np.int64)
    assert degree_hotness(indices, 5).tolist() == [1, 2, 0, 3, 0]
    counts = count_hotness([torch.tensor([0, 2, 2]), torch.tensor([2, 4])], 5)
    assert counts.tolist() == [1, 0, 3, 0, 1]


def test_hotness_of_the_wrong_length_is_refused():
    _, t = table(10)
    with pytest.raises(ValueError, match=r"hotness has shape \(9,\); accepted: one score per row \(10,\)"):
        DeviceCache(t, np.zeros(9), 1000, CPU)
