"""BatchProducer: the host bytes a worker copies per batch (gathers and encode output)."""
import torch

from ibp_graph.pipeline.codec_setup import build_codecs
from ibp_graph.pipeline.grouping import SCALAR_BLOCK
from ibp_graph.pipeline.requests import BatchRequest
from ibp_graph.pipeline.worker import BatchProducer
from ibp_graph.sampling.graph import CSCGraph
from ibp_graph.sampling.neighbor import NeighborSampler


def _producer(codec: str) -> BatchProducer:
    g = torch.Generator().manual_seed(0)
    n = 200
    edge_index = torch.randint(0, n, (2, 2000), generator=g)
    sampler = NeighborSampler(CSCGraph.from_edge_index(edge_index, n), [5, 3])
    x = torch.randn(n, 16, generator=g)
    codecs = build_codecs({"x": x}, {}, num_nodes=n, num_edges=2000, codec=codec)
    return BatchProducer(sampler, torch.arange(n), {"x": x}, {}, codecs)


def test_identity_batch_copies_only_its_gathers():
    batch = _producer("identity")[BatchRequest(index=torch.arange(10), seed=3)]
    tensors, _, _, _ = _producer("identity").gather(BatchRequest(index=torch.arange(10), seed=3))
    gathered = tensors["x"].nbytes + tensors["edge_index"].nbytes
    # the int64 scalars (n_id, e_id, input_id, edge_index) are concatenated once, padded to
    # whole SCALAR_BLOCK rows: one more copy of them; x's group is x itself, encoded as a view
    n_ints = sum(t.numel() for name, t in tensors.items() if name != "x")
    ints = -(-n_ints // SCALAR_BLOCK) * SCALAR_BLOCK * 8
    assert batch.copied_bytes == gathered + ints
    ibp = _producer("ibp")[BatchRequest(index=torch.arange(10), seed=3)]
    assert ibp.copied_bytes > batch.copied_bytes  # ibp's encode writes a new payload
