"""CompressedNeighborLoader on a HeteroData and a CUDA device: batches equal the CPU path's, bit for bit.

Marked `gpu`: run with `python -m pytest -m gpu` on a machine with a GPU (CI deselects it).
Selecting these tests without a GPU fails instead of skipping.
"""
import pytest
import torch

from tests.loaders.test_pyg_hetero import batches, make_hetero

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("need_gpu")]


@pytest.mark.parametrize("codec,num_workers,filter_per_worker", [("auto", 0, None), ("identity", 2, True),
                                                                 ("auto", 2, False)])
def test_cuda_hetero_batches_equal_cpu_batches(codec, num_workers, filter_per_worker):
    data = make_hetero(papers=3000, authors=3000, dim=32)  # per-type codecs (split groups) included
    kw = dict(num_neighbors=[4, 3], input_nodes="paper", batch_size=512, shuffle=True, codec=codec)
    on_cpu = batches(data, device="cpu", **kw)
    on_gpu = batches(data, device="cuda", num_workers=num_workers, filter_per_worker=filter_per_worker, **kw)
    assert len(on_gpu) == len(on_cpu)
    for a, b in zip(on_cpu, on_gpu):
        for t in a.node_types:
            for key in ("x", "n_id", "y"):
                if key in a[t]:
                    assert b[t][key].is_cuda and torch.equal(a[t][key], b[t][key].cpu()), (t, key)
            assert a[t].num_sampled_nodes == b[t].num_sampled_nodes
        for e in a.edge_types:
            for key in ("edge_index", "e_id"):
                assert b[e][key].is_cuda and torch.equal(a[e][key], b[e][key].cpu()), (e, key)
        assert torch.equal(a["paper"].input_id, b["paper"].input_id.cpu())
