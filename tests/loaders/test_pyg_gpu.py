"""CompressedNeighborLoader on a CUDA device: the batches equal the CPU path's, bit for bit.

Marked `gpu`: run with `python -m pytest -m gpu` on a machine with a GPU (CI deselects it).
Selecting these tests without a GPU fails instead of skipping.
"""
import dataclasses

import pytest
import torch

from ibp_graph.data.store import EncodedTable
from ibp_graph.loaders.pyg import CompressedNeighborLoader

from tests.loaders.test_pyg import make_graph

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("need_gpu")]

KEYS = ("x", "y", "n_id", "e_id", "edge_index", "input_id", "edge_attr")


def batches(data, device, codec="auto", prefetch=2, num_workers=0, seed=5):
    torch.manual_seed(seed)
    loader = CompressedNeighborLoader(data, [6, 4], batch_size=256, shuffle=True, codec=codec,
                                      device=device, prefetch=prefetch, num_workers=num_workers)
    return loader, list(loader)


def compare_cuda_with_cpu(codec, prefetch, num_workers):
    data = make_graph(num_nodes=6000, num_edges=60000, dim=32)
    _, on_cpu = batches(data, "cpu", codec)
    loader, on_gpu = batches(data, "cuda", codec, prefetch=prefetch, num_workers=num_workers)
    assert len(on_gpu) == len(on_cpu)
    for a, b in zip(on_cpu, on_gpu):
        for key in KEYS:
            assert b[key].is_cuda, key
            assert torch.equal(a[key], b[key].cpu()), key
        assert a.batch_size == b.batch_size and a.num_sampled_nodes == b.num_sampled_nodes
    assert loader.stats.seconds["decode"] > 0 and loader.stats.seconds["copy"] > 0
    return loader


@pytest.mark.parametrize("codec", ["ibp", "identity"])
@pytest.mark.parametrize("prefetch,num_workers", [(0, 0), (2, 0), (3, 2)])
def test_cuda_batches_equal_cpu_batches(codec, prefetch, num_workers):
    compare_cuda_with_cpu(codec, prefetch, num_workers)


@pytest.mark.parametrize("codec,prefetch,num_workers", [("ebp", 0, 0), ("ebp", 3, 2), ("auto", 2, 0)])
def test_cuda_ebp_and_auto_batches_equal_cpu_batches(codec, prefetch, num_workers):
    """EBP groups decode with kernels/ebp_decode.cu on the side stream, as IBP groups do with IBP's."""
    loader = compare_cuda_with_cpu(codec, prefetch, num_workers)
    assert loader.codecs["float32[32]"].name == "ebp"  # auto picks EBP on these rows too


def test_batches_survive_work_on_the_consumer_stream():
    """Tensors handed over from the side stream stay valid while the consumer keeps working."""
    data = make_graph(num_nodes=6000, num_edges=60000, dim=32)
    _, reference = batches(data, "cpu")
    torch.manual_seed(5)
    loader = CompressedNeighborLoader(data, [6, 4], batch_size=256, shuffle=True, device="cuda",
                                      prefetch=4)
    big = torch.randn(4096, 4096, device="cuda")
    for ref, batch in zip(reference, loader):
        for _ in range(4):  # keep the current stream busy while later batches decode
            big = (big @ big).clamp_(-1, 1)
        assert torch.equal(batch.x.cpu(), ref.x)
        del batch  # the allocator may reuse the memory: record_stream must make that safe


@pytest.mark.parametrize("store_codec", ["ibp", "ebp", "identity"])
def test_pre_encoded_store_on_cuda(store_codec):
    data = make_graph(num_nodes=6000, num_edges=60000, dim=32)
    _, on_cpu = batches(data, "cpu")
    data.x = EncodedTable.encode(data.x, store_codec)
    loader, on_gpu = batches(data, "cuda")
    assert loader.codecs["x@store"].name == store_codec
    for a, b in zip(on_cpu, on_gpu):
        assert torch.equal(a.x, b.x.cpu())


def test_a_corrupt_group_raises_when_its_batch_is_handed_out():
    """The decode stage queues batches without waiting on the GPU; a corrupt group still
    raises CorruptPayloadError, when its batch is finished and before it is handed out."""
    from torch.utils.data import DataLoader

    from ibp_graph.codec import CorruptPayloadError

    data = make_graph(num_nodes=6000, num_edges=60000, dim=32)
    torch.manual_seed(5)
    loader = CompressedNeighborLoader(data, [6, 4], batch_size=256, shuffle=True, codec="ibp",
                                      device="cuda", prefetch=2)
    encoded = list(DataLoader.__iter__(loader))[:4]
    name = "float32[32]"  # the group of x
    assert loader.codecs[name].name == "ibp"
    key = next(k for k in encoded[2].groups if str(k) == name)  # its GroupKey
    ct = encoded[2].groups[key]
    offs = ct.offsets.clone()
    offs[2] = offs[1] + ct.raw_nbytes // ct.n_rows + 8  # row 1 longer than a raw row
    encoded[2].groups[key] = dataclasses.replace(ct, offsets=offs)
    out = loader._stage(iter(encoded))
    for _ in range(2):  # the batches before it are fine
        batch = next(out)
        assert torch.equal(batch["x"].cpu(), data.x[batch["n_id"].cpu()])
    with pytest.raises(CorruptPayloadError, match="row 1"):
        next(out)
