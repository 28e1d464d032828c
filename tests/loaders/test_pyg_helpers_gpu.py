"""PyG's helpers and byte groups with device='cuda': decoded on the GPU, equal to the CPU path.

Marked `gpu`: run with `python -m pytest -m gpu` on a machine with a GPU (CI deselects it).
Selecting these tests without a GPU fails instead of skipping.
"""
import pytest
import torch
from torch_geometric.loader import ZipLoader
from torch_geometric.nn import GraphSAGE

from ibp_graph.loaders.pyg import CompressedNeighborLoader
from tests.loaders.test_pyg import make_graph
from tests.loaders.test_pyg_dtypes import _bytes, _random
from tests.loaders.test_pyg_helpers import small_graph

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("need_gpu")]


@pytest.mark.parametrize("dtype", [torch.complex64, torch.uint16, torch.uint64, torch.float8_e4m3fn,
                                   torch.complex128], ids=str)
def test_byte_groups_decode_on_the_gpu_bit_for_bit(dtype):
    g = torch.Generator().manual_seed(0)
    data = make_graph(300, 2000)
    data.z = _random(dtype, 300, 5, g)
    loader = CompressedNeighborLoader(data, [3, 2], batch_size=64, codec="auto", device="cuda")
    for batch in loader:
        assert batch.z.device.type == "cuda" and batch.z.dtype == dtype
        assert torch.equal(_bytes(batch.z.cpu()), _bytes(data.z).index_select(0, batch.n_id.cpu()))


def test_layer_wise_inference_on_the_gpu():
    data = small_graph()
    torch.manual_seed(0)
    model = GraphSAGE(12, 16, num_layers=2, out_channels=5).eval()
    loader = CompressedNeighborLoader(data, [-1], batch_size=64, device="cuda")
    # batches (n_id included) are on the GPU: the embeddings live there too
    out = model.cuda().inference(loader, device="cuda", embedding_device="cuda")
    full = model(data.x.cuda(), data.edge_index.cuda())
    assert out.device.type == "cuda" and torch.allclose(out, full, atol=1e-5, rtol=1e-5)


def test_zip_loader_decodes_in_the_main_process_or_says_why_not():
    data = make_graph(400, 3000)
    loaders = [CompressedNeighborLoader(data, [-1], batch_size=50, device="cuda") for _ in range(2)]
    ok = next(iter(ZipLoader(loaders, batch_size=50, filter_per_worker=False, num_workers=2)))
    assert all(b.x.device.type == "cuda" and torch.equal(b.x.cpu(), data.x[b.n_id.cpu()]) for b in ok)
    with pytest.raises(RuntimeError, match="filter_per_worker=False"):
        next(iter(ZipLoader(loaders, batch_size=50, filter_per_worker=True, num_workers=2)))
