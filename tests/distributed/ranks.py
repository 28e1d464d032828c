"""One rank of the sharded-feature tests (tests/distributed/test_sharded.py runs it once per rank):
`python ranks.py CASE RANK WORLD PORT OUT` writes OUT/rankR.json: the SHA-256 of every tensor of every
batch of the sharded loader and of the single-host loader given the same seeds, and the loader stats."""
import hashlib
import json
import os
import sys

import torch


def digest(batch) -> dict:
    """SHA-256 of every tensor of a PyG Data / HeteroData, by its store and key."""
    out = {}
    stores = batch.stores if hasattr(batch, "stores") else [batch]
    for store in stores:
        for k, v in store.items():
            if isinstance(v, torch.Tensor):
                key = f"{getattr(store, '_key', None)}.{k}"
                out[key] = hashlib.sha256(v.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
                                          + str((v.dtype, tuple(v.shape))).encode()).hexdigest()
    return out


def graph(seed: int = 0, n: int = 600, e: int = 4000, dim: int = 12):
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    x[::7, 3] = float("nan")
    x[1::5, 0] = -0.0
    x = x.view(torch.int32)
    x[2::11, 1] = 0x7fc00123  # a NaN with a payload
    x = x.view(torch.float32)
    edge_index = torch.randint(0, n, (2, e), generator=g)
    return Data(x=x, edge_index=edge_index, y=torch.randint(0, 5, (n,), generator=g), num_nodes=n)


def pyg_homo(rank, world, cache_bytes=0, codec="auto"):
    from ibp_graph.data.shards import ShardLayout, shard_of
    from ibp_graph.data.store import EncodedTable
    from ibp_graph.loaders.pyg import CompressedNeighborLoader
    from ibp_graph.pipeline.sharded import ShardedSource

    data = graph()
    store = EncodedTable.encode(data.x, codec, progress=False)
    layout = ShardLayout.contiguous(data.num_nodes, world)
    sharded = data.clone()
    sharded.x = ShardedSource(shard_of(store, layout, rank), layout, cache_bytes=cache_bytes, timeout=60)
    kw = dict(num_neighbors=[4, 3], batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(1),
              rank=rank, world_size=world, codec=codec)
    ours = CompressedNeighborLoader(sharded, **kw)
    kw["generator"] = torch.Generator().manual_seed(1)
    ref = CompressedNeighborLoader(data, **kw)
    return ours, ref


CASES = {"pyg_homo": pyg_homo, "pyg_homo_cache": lambda r, w: pyg_homo(r, w, cache_bytes=4000),
         "pyg_homo_identity": lambda r, w: pyg_homo(r, w, codec="identity")}


def main():
    case, rank, world, port, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world)
    ours, ref = CASES[case](rank, world)
    result = {"ours": [], "ref": []}
    for epoch in range(2):
        result["ours"] += [digest(b) for b in ours]
        result["ref"] += [digest(b) for b in ref]
    result["stats"] = ours.stats.as_dict()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
