"""Feature modes and sources: argument checks, the mode `auto` picks, the sources a plan builds, served rows
through a batch, assembly and stats."""
import dataclasses

import numpy as np
import pytest
import torch

from ibp_graph.data.store import EncodedTable
from ibp_graph.gpu.pinned import PinError, Registration, pin_table
from ibp_graph.pipeline import features as F
from ibp_graph.pipeline.cache import DeviceCache
from ibp_graph.pipeline.codec_setup import build_codecs
from ibp_graph.pipeline.decode import DecodeStage
from ibp_graph.pipeline.features import check_features, neighbour_hotness, plan_features, resolve_mode
from ibp_graph.pipeline.grouping import store_key
from ibp_graph.pipeline.producer import BatchPlan, produce
from ibp_graph.pipeline.sources import (CachedSource, Served, Tally, TensorSource, ZeroCopySource, assemble)
from ibp_graph.pipeline.stats import LoaderStats

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def x_table(n=200, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.arange(n, dtype=torch.float32).unsqueeze(1) + torch.randn(n, dim, generator=g) * 0.01).contiguous()


@pytest.mark.parametrize("value", ["gpu", "zero-copy", None, 1, "WORKER"])
def test_bad_mode_names_the_argument_and_the_modes(value):
    with pytest.raises(ValueError, match=r"features=.* is not accepted; use one of \('worker', 'zero_copy', "
                                         r"'auto'\)"):
        check_features(value)


def test_auto_picks_worker_on_the_cpu_and_with_raw_tables():
    store = EncodedTable.encode(x_table(), "ibp", progress=False)
    assert resolve_mode("auto", CPU, {"x": store}) == "worker"
    assert resolve_mode("auto", CUDA, {"x": x_table()}, available=2**40) == "worker"  # never encodes silently
    assert resolve_mode("auto", CUDA, {}, available=2**40) == "worker"
    for mode in ("worker", "zero_copy"):
        assert resolve_mode(mode, CPU, {"x": x_table()}) == mode


def test_auto_picks_zero_copy_on_cuda_when_the_stores_fit_in_pinned_memory():
    store = EncodedTable.encode(x_table(), "ibp", progress=False)
    assert resolve_mode("auto", CUDA, {"x": store}, available=2 * store.nbytes) == "zero_copy"
    assert resolve_mode("auto", CUDA, {"x": store}, available=2 * store.nbytes - 1) == "worker"


def test_plan_zero_copy_takes_feature_tables_from_the_workers_and_encodes_raw_ones_once():
    x, y = x_table(), torch.arange(200) % 3
    emb = EncodedTable.encode(x_table(seed=1), "ebp", progress=False)
    plan = plan_features({"x": x, "y": y, "emb": emb}, features="zero_copy", device_cache=0, device=CPU,
                         hotness=neighbour_hotness(np.zeros(0, np.int64), 200), codec="ibp")
    assert plan.mode == "zero_copy"
    assert plan.node_attrs["y"] is y  # labels stay with the workers
    src = plan.serving.sources
    assert set(src) == {"x", "emb"} and all(isinstance(s, ZeroCopySource) for s in src.values())
    assert src["emb"].store is emb  # a store is used as it is
    assert src["x"].codec.name == "ibp"  # a raw table is encoded with the loader's codec
    assert torch.equal(src["x"].store.decode_rows(torch.arange(200)), x)
    assert set(plan.codec_attrs) == {"x", "y", "emb"} and plan.codec_attrs["emb"] is emb


def test_plan_worker_without_cache_changes_nothing():
    attrs = {"x": x_table(), "y": torch.zeros(200, dtype=torch.int64)}
    plan = plan_features(attrs, features="worker", device_cache=0, device=CPU,
                         hotness=neighbour_hotness(np.zeros(0, np.int64), 200))
    assert plan.serving is None and plan.describe() == "worker"
    assert isinstance(plan.node_attrs["x"], TensorSource) and plan.node_attrs["x"].tensor is attrs["x"]
    assert plan.node_attrs["y"] is attrs["y"] and plan.codec_attrs == attrs


def test_plan_worker_with_a_cache_sends_only_misses():
    indices = np.random.default_rng(0).integers(0, 200, 2000)
    plan = plan_features({"x": x_table()}, features="worker", device_cache=200 * 4 + 2000, device=CPU,
                         hotness=neighbour_hotness(indices, 200), codec="ibp")
    x = plan.node_attrs["x"]
    assert isinstance(x, CachedSource) and not x.fallback.served and "device_cache x:" in plan.describe()
    ids = torch.arange(200)
    source, rest = x.worker_rows(ids)
    assert source is x.fallback and torch.equal(rest, ids[~x.cache.hot_mask])  # the misses only


def test_a_source_object_is_used_as_given():
    store = EncodedTable.encode(x_table(), "ibp", progress=False)
    mine = ZeroCopySource(store)
    plan = plan_features({"x": mine, "y": torch.zeros(200)}, features="worker", device_cache=0, device=CPU,
                         hotness=neighbour_hotness(np.zeros(0, np.int64), 200))
    assert plan.node_attrs["x"] is mine and plan.serving.sources == {"x": mine} and plan.mode == "worker"
    with pytest.raises(TypeError, match="CachedSource caches the compressed rows of a store source"):
        CachedSource(TensorSource(x_table()), DeviceCache(store, np.ones(200), 200 * 4 + 2000, CPU))


def test_assemble_copies_bits_in_sampled_order():
    nan_bits = torch.tensor([0x7FC00001, 0x7F800001, -1, 0xFFC12345 - 2**32], dtype=torch.int32)
    hits = nan_bits[:2].view(torch.float32).reshape(2, 1).repeat(1, 3)
    misses = nan_bits[2:].view(torch.float32).reshape(2, 1).repeat(1, 3)
    out = assemble(4, torch.tensor([3, 0]), hits, torch.tensor([1, 2]), misses)
    want = torch.stack([hits[1], misses[0], misses[1], hits[0]])
    assert torch.equal(out.view(torch.int32), want.view(torch.int32))  # NaN payloads kept
    odd = torch.arange(12, dtype=torch.uint8).reshape(4, 3)  # rows of 3 bytes: copied byte-wise
    assert torch.equal(assemble(4, torch.tensor([1, 3]), odd[:2], torch.tensor([0, 2]), odd[2:]), odd[[2, 0, 3, 1]])
    assert assemble(0, torch.zeros(0, dtype=torch.int64), hits[:0], torch.zeros(0, dtype=torch.int64),
                    misses[:0]).shape == (0, 3)


def _source(zero_copy, budget, codec="ibp"):
    x = x_table(300)
    store = EncodedTable.encode(x, codec, progress=False)
    indices = np.random.default_rng(1).integers(0, 300, 3000)
    plan = plan_features({"x": store}, features="zero_copy" if zero_copy else "worker", device_cache=budget,
                         device=CPU, hotness=neighbour_hotness(indices, 300))
    return x, store, plan


def _through_a_batch(plan, wanted):
    """`wanted` ({tensor name: node ids} of feature "x") planned, produced and decoded as a loader would:
    the decoded tensors and the stats."""
    bp = BatchPlan()
    for name, ids in wanted.items():
        bp.gather(name, plan.node_attrs["x"], ids, store="x")
    codecs = build_codecs(plan.codec_attrs, {}, num_nodes=300, num_edges=0, codec="identity")
    stats = LoaderStats()
    stage = DecodeStage(codecs, CPU, stats=stats, features=plan.serving)
    return bp, next(iter(stage(iter([produce(bp, codecs)])))), stats


@pytest.mark.parametrize("codec", ["ibp", "ebp", "identity"])
@pytest.mark.parametrize("budget", [0, 300 * 4 + 4000])
def test_zero_copy_fill_counts_rows_and_bytes_per_tier(codec, budget):
    x, store, plan = _source(True, budget, codec)
    ids = torch.randint(0, 300, (700,), generator=torch.Generator().manual_seed(2))
    tally = plan.serving.fill([Served("x", "x", "n_id", sent=False, own_ids=False)], got := {"n_id": ids}, {})
    assert torch.equal(got["x"].view(torch.int32), x[ids].view(torch.int32))
    c = tally.counts()
    lengths = store.compressed.row_lengths()
    hot = plan.node_attrs["x"].cache.slots[ids] >= 0 if budget else torch.zeros(700, dtype=torch.bool)
    assert (c["hits"], c["misses"]) == ((int(hot.sum()), int((~hot).sum())) if budget else (0, 0))  # no cache: none
    assert c["cache_bytes"] == int(lengths[ids[hot]].sum()) and c["zero_copy_bytes"] == int(lengths[ids[~hot]].sum())
    assert c["worker"] == 0
    stats = LoaderStats()
    stats.add_tiers(**c)
    assert stats.hit_rate == pytest.approx(c["hits"] / 700) and stats.tier_bytes["zero_copy"] == c["zero_copy_bytes"]
    assert stats.as_dict()["features"]["tier_bytes"]["zero_copy"] == c["zero_copy_bytes"]
    assert "features" not in LoaderStats().as_dict()  # a loader serving no features: no section


@pytest.mark.parametrize("zero_copy", [True, False])
def test_ids_sent_for_served_rows_are_named_by_records_and_dropped(zero_copy):
    """A front-end whose features sit in several places (DGL's blocks) sends ids per place: the batch
    says which tensor holds them (Served records), nothing is read from tensor names."""
    x, store, plan = _source(zero_copy, 300 * 4 + 4000)
    a = torch.randint(0, 300, (90,), generator=torch.Generator().manual_seed(6))
    b = torch.randint(0, 300, (40,), generator=torch.Generator().manual_seed(7))
    bp, batch, stats = _through_a_batch(plan, {"blocks[0].x": a, "blocks[1].x": b})
    assert [(s.name, s.source, s.sent, s.own_ids) for s in bp.served] == [
        ("blocks[0].x", "x", not zero_copy, True), ("blocks[1].x", "x", not zero_copy, True)]
    assert [it.name for it in bp.stored.get("x", [])] == ([] if zero_copy else ["blocks[0].x", "blocks[1].x"])
    assert set(batch) == {"blocks[0].x", "blocks[1].x"}  # the ids tensors are dropped once served
    assert torch.equal(batch["blocks[0].x"], x[a]) and torch.equal(batch["blocks[1].x"], x[b])
    assert stats.cache_hits + stats.cache_misses == 130
    assert stats.tier_bytes["worker"] == (0 if zero_copy else stats.sent_bytes["x@store"])


def test_ids_already_in_the_batch_are_not_sent_twice():
    x, store, plan = _source(True, 0)
    ids = torch.randint(0, 300, (50,), generator=torch.Generator().manual_seed(8))
    bp = BatchPlan()
    bp.put("n_id", ids)
    bp.gather("x", plan.node_attrs["x"], ids)
    assert bp.served == [Served("x", "x", "n_id", sent=False, own_ids=False)]
    assert [m.name for ms in bp.groups.values() for m in ms] == ["n_id"]


def test_worker_misses_are_checked_against_the_cache_map():
    x, store, plan = _source(False, 300 * 4 + 4000)
    ids = torch.randint(0, 300, (100,), generator=torch.Generator().manual_seed(5))
    source, rest = plan.node_attrs["x"].worker_rows(ids)
    misses = store.codec.decode(source.read(rest))
    served = [Served("x", "x", "n_id", sent=True, own_ids=False)]
    key = store_key("x", store.dtype, (8,))
    tally = plan.serving.fill(served, got := {"n_id": ids, "x": misses}, {key: store.compressed})
    assert torch.equal(got["x"], x[ids]) and tally.worker_bytes == store.compressed.nbytes
    with pytest.raises(RuntimeError, match=r"the workers sent \d+ rows of 'x' for \d+ cache misses"):
        plan.serving.fill(served, {"n_id": ids, "x": misses[1:]}, {})


# ---- pinning (the CPU-side logic; the real registration runs in tests/gpu/test_features_gpu.py)
def _ct():
    return EncodedTable.encode(x_table(50), "ibp", progress=False).compressed


def test_pin_table_registers_in_place_and_releases():
    calls = []
    ct = _ct()
    out, reg = pin_table(ct, _register=(lambda p, n: calls.append(("reg", p, n)), lambda p: calls.append(("unreg", p))))
    assert out is ct and isinstance(reg, Registration) and reg.active
    assert [c[1:] for c in calls] == [(ct.payload.data_ptr(), ct.payload.numel()),
                                     (ct.offsets.data_ptr(), ct.offsets.numel() * ct.offsets.element_size())]
    reg.release()
    reg.release()  # idempotent
    assert [c for c in calls if c[0] == "unreg"] == [("unreg", ct.payload.data_ptr()), ("unreg", ct.offsets.data_ptr())]
    assert not reg.active


def test_pin_table_that_cannot_pin_names_the_table_the_bytes_and_the_way_out(monkeypatch):
    def refuse(p, n):
        raise RuntimeError("cudaErrorHostMemoryAlreadyRegistered")

    def no_pinned_memory(self):
        raise RuntimeError("CUDA error: out of memory")

    monkeypatch.setattr(torch.Tensor, "pin_memory", no_pinned_memory)

    undone = []
    with pytest.raises(PinError, match=r"features='zero_copy' store \([0-9.]+ GiB of compressed rows\) cannot be "
                                       r"made page-locked: cudaHostRegister in place failed .*a pinned copy failed "
                                       r".*accepted: a table that fits in pinned host memory, or features='worker'"):
        pin_table(_ct(), "features='zero_copy' store", _register=(refuse, undone.append))


def test_pin_table_refuses_what_is_not_a_host_table():
    with pytest.raises(TypeError, match="table must be a CompressedTensor, got Tensor"):
        pin_table(torch.zeros(3))
    meta = dataclasses.replace(_ct(), payload=torch.zeros(8, dtype=torch.uint8, device="meta"))
    with pytest.raises(ValueError, match="table is on meta; accepted: a table in host memory"):
        pin_table(meta)


def test_zero_copy_source_prepare_on_the_cpu_reads_the_store_in_place():
    store = EncodedTable.encode(x_table(40), "ibp", progress=False)
    src = ZeroCopySource(store)
    with pytest.raises(RuntimeError, match="before prepare"):
        src.fetch(torch.arange(3), None, Tally())
    src.prepare(CPU)
    assert src.pinned is store.compressed
    src.release()
    assert src.pinned is None and F.available_host_memory() > 0
