"""BatchProducer: the host bytes a worker copies per batch (gathers and encode output)."""
import torch

from ibp_graph.pipeline.codec_setup import build_codecs
from ibp_graph.pipeline.grouping import SCALAR_BLOCK
from ibp_graph.pipeline.plans import NeighborPlanner
from ibp_graph.pipeline.producer import BatchProducer
from ibp_graph.pipeline.requests import BatchRequest
from ibp_graph.sampling.graph import CSCGraph
from ibp_graph.sampling.neighbor import NeighborSampler


def _producer(codec: str) -> BatchProducer:
    g = torch.Generator().manual_seed(0)
    n = 200
    edge_index = torch.randint(0, n, (2, 2000), generator=g)
    sampler = NeighborSampler(CSCGraph.from_edge_index(edge_index, n), [5, 3])
    x = torch.randn(n, 16, generator=g)
    codecs = build_codecs({"x": x}, {}, num_nodes=n, num_edges=2000, codec=codec)
    return BatchProducer(NeighborPlanner(sampler, torch.arange(n), {"x": x}, {}), codecs)


def test_identity_batch_copies_only_its_gathers():
    producer = _producer("identity")
    req = BatchRequest(index=torch.arange(10), seed=3)
    batch = producer[req]
    plan, _ = producer.planner.plan(req, producer.planner.sample(req))
    (x,) = [it for key, items in plan.groups.items() if not key.scalar for it in items]
    gathered = x.numel * 4  # x's rows, gathered straight into its group (identity encodes a view)
    # the int64 scalars (n_id, e_id, input_id, edge_index) are copied once into their stream,
    # padded to whole SCALAR_BLOCK rows (edge_index is written there from the sampled rows and
    # columns: no stacked copy first)
    n_ints = sum(it.numel for key, items in plan.groups.items() if key.scalar for it in items)
    ints = -(-n_ints // SCALAR_BLOCK) * SCALAR_BLOCK * 8
    assert batch.copied_bytes == gathered + ints
    ibp = _producer("ibp")[req]
    assert ibp.copied_bytes > batch.copied_bytes  # ibp's encode writes a new payload
