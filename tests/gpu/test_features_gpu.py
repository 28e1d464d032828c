"""Zero-copy feature fetches and the device cache on a CUDA GPU, bit for bit against the CPU path.

Marked `gpu`: run with ``python -m pytest -m gpu`` on a machine with a GPU (CI deselects
it). Selecting these tests without a GPU fails instead of skipping.
"""
import numpy as np
import pytest
import torch

from ibp_graph import gpu
from ibp_graph.data.store import EncodedTable
from ibp_graph.gpu.pinned import pin_table
from ibp_graph.loaders.pyg import CompressedNeighborLoader
from ibp_graph.pipeline.cache import cache_budget
from ibp_graph.pipeline.features import neighbour_hotness, plan_features
from ibp_graph.pipeline.sources import Served

from tests.loaders.test_pyg import make_graph

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("need_gpu")]

KEYS = ("x", "y", "n_id", "e_id", "edge_index", "input_id", "edge_attr")
CODECS = ["ibp", "ebp", "identity"]


def table(n=5000, dim=32, codec="ibp", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, dim, generator=g) * 0.1).half().float()
    x[:, 0] = torch.arange(n, dtype=torch.float32)
    return x, EncodedTable.encode(x, codec, progress=False)


def bits(t):
    return t.detach().cpu().contiguous().view(torch.uint8)


@pytest.mark.parametrize("codec", CODECS)
def test_a_store_registered_in_place_is_fetched_zero_copy_exactly(codec):
    x, store = table(codec=codec)
    pinned, reg = pin_table(store.compressed)
    assert reg is not None and reg.active  # registered in place, no copy
    assert pinned.payload.data_ptr() == store.compressed.payload.data_ptr() and pinned.is_pinned()
    idx = torch.randint(0, x.shape[0], (3000,), generator=torch.Generator().manual_seed(1))
    out = torch.full((3000, 32), float("nan"), device="cuda")
    gpu.fetch(store.codec, pinned, idx.cuda(), out=out)
    assert torch.equal(bits(out), bits(x[idx]))
    reg.release()
    assert not reg.active and not store.compressed.payload.is_pinned()


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("zero_copy,budget", [(True, 0), (True, 5000 * 4 + 40_000), (False, 5000 * 4 + 40_000)])
def test_feature_source_on_cuda_equals_the_cpu_stand_in(codec, zero_copy, budget):
    x, store = table(codec=codec)
    indices = np.random.default_rng(2).integers(0, 5000, 50_000)
    plans = {d: plan_features({"x": store}, features="zero_copy" if zero_copy else "worker",
                              device_cache=budget, device=torch.device(d), hotness=neighbour_hotness(indices, 5000))
             for d in ("cpu", "cuda")}
    ids = torch.randint(0, 5000, (4000,), generator=torch.Generator().manual_seed(3))
    served = [Served("x", "x", "n_id", sent=not zero_copy, own_ids=False)]
    got, counts = {}, {}
    for d, plan in plans.items():
        tensors = {"n_id": ids.to(d)}
        if not zero_copy:  # the workers' misses, decoded
            source, rest = plan.node_attrs["x"].worker_rows(ids)
            tensors["x"] = store.codec.decode(source.read(rest)).to(d)
        checks = gpu.PendingChecks() if d == "cuda" else None
        counts[d] = plan.serving.fill(served, tensors, {}, checks).counts()
        got[d] = tensors["x"]
        if checks is not None:
            torch.cuda.synchronize()
            checks.raise_first()
    assert got["cuda"].is_cuda
    assert torch.equal(bits(got["cuda"]), bits(x[ids]))
    assert counts["cuda"] == counts["cpu"]  # same hits, misses and bytes
    plans["cuda"].serving.release()


def loader_batches(data, device, num_workers=0, **kw):
    torch.manual_seed(7)
    loader = CompressedNeighborLoader(data, [6, 4], batch_size=256, shuffle=True, device=device,
                                      num_workers=num_workers, **kw)
    return loader, list(loader)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("features,device_cache,num_workers", [
    ("zero_copy", 0, 0), ("auto", 0, 2), ("zero_copy", 6000 * 4 + 60_000, 0), ("worker", 6000 * 4 + 60_000, 2),
    ("auto", 0.001, 0)])
def test_loader_on_cuda_equals_the_cpu_worker_path(codec, features, device_cache, num_workers):
    data = make_graph(num_nodes=6000, num_edges=60000, dim=32)
    data.x = EncodedTable.encode(data.x, codec, progress=False)
    _, on_cpu = loader_batches(data, "cpu", features="worker")
    loader, on_gpu = loader_batches(data, "cuda", num_workers, features=features, device_cache=device_cache)
    assert loader.features.mode == ("zero_copy" if features == "auto" else features)  # auto: the store fits
    assert len(on_gpu) == len(on_cpu)
    for a, b in zip(on_cpu, on_gpu):
        for key in KEYS:
            assert b[key].is_cuda, key
            assert torch.equal(bits(a[key]), bits(b[key])), key
    s = loader.stats
    if device_cache:
        assert s.cache_hits + s.cache_misses == sum(b.n_id.numel() for b in on_gpu) and s.cache_hits > 0
        if isinstance(device_cache, float):
            assert s.cache["x"]["budget_bytes"] == cache_budget(device_cache, torch.device("cuda"))
    if loader.features.mode == "zero_copy":
        assert s.tier_bytes["zero_copy"] > 0 and "x@store" not in s.sent_bytes


def test_feature_mode_benchmark_runs_every_variant_exactly_on_cuda():
    """gpu_check's epoch step on a tiny graph: every variant (resident too) is bit exact first."""
    from ibp_graph.benchmarks.features import GPU_VARIANTS, run

    report = run(num_nodes=20_000, avg_degree=8, base_rows=4096, epoch_seeds=1024, batch_size=256,
                 num_neighbors=(5, 3), num_workers=0, device="cuda", device_cache=20_000 * 4 + 400_000,
                 out=None, quiet=True)
    by = {r["variant"]: r for r in report["results"]}
    assert tuple(by) == GPU_VARIANTS and all(r["exact"] == "yes" for r in by.values())
    assert by["resident"]["vs_resident"] == 1.0 and 0 < by["auto-zero-copy+cache"]["hit_rate"] < 1


@pytest.mark.parametrize("features,device_cache,num_workers", [
    ("zero_copy", 0, 0), ("zero_copy", 2 * (1200 * 4 + 20_000), 2), ("worker", 2 * (1200 * 4 + 20_000), 0)])
def test_heterogeneous_loader_on_cuda_equals_the_cpu_worker_path(features, device_cache, num_workers):
    from tests.loaders.test_pyg_hetero import make_hetero

    data = make_hetero()
    data["paper"].x = EncodedTable.encode(data["paper"].x, "ebp", progress=False)  # a store and a raw table
    data["paper"].num_nodes = 900
    kw = dict(num_neighbors=[4, 3], input_nodes="paper", batch_size=128, shuffle=True)
    torch.manual_seed(7)
    on_cpu = list(CompressedNeighborLoader(data, device="cpu", features="worker", **kw))
    torch.manual_seed(7)
    loader = CompressedNeighborLoader(data, device="cuda", features=features, device_cache=device_cache,
                                      num_workers=num_workers, **kw)
    on_gpu = list(loader)
    assert loader.features.mode == features and len(on_gpu) == len(on_cpu)
    for a, b in zip(on_cpu, on_gpu):
        for t in ("paper", "author"):
            for key in ("x", "n_id"):
                assert b[t][key].is_cuda and torch.equal(bits(a[t][key]), bits(b[t][key])), (t, key)
    if device_cache:
        assert loader.stats.cache_hits > 0 and set(loader.features.caches) == {"paper.x", "author.x"}
    if features == "zero_copy":
        assert loader.stats.tier_bytes["zero_copy"] > 0
