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
