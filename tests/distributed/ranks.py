"""One rank of the sharded-feature tests (tests/distributed/test_sharded.py runs it once per rank):
`python ranks.py CASE RANK WORLD PORT OUT` writes OUT/rankR.json: the SHA-256 of every tensor of every
batch of the sharded loader and of the single-host loader given the same seeds, and the loader stats."""
import dataclasses
import hashlib
import itertools
import json
import os
import sys
import time

import numpy as np
import torch

#: what a case records beside the batches (main adds it to the rank's result)
EXTRA = {}
#: what a case does once this rank raised (main calls each, after recording the error)
AFTER_ERROR = []
#: when this rank's loaders were built (built()): the tests time what follows, start-up and imports left out
BUILT_AT = []


def built(*loaders):
    """The loaders, with the time they were built recorded in BUILT_AT."""
    BUILT_AT.append(time.time())
    return loaders


def digest(batch) -> dict:
    """SHA-256 of every tensor of a PyG Data / HeteroData, by its store and key."""
    out = {}
    stores = batch.stores if hasattr(batch, "stores") else [batch]
    for store in stores:
        for k, v in store.items():
            if isinstance(v, torch.Tensor):
                key = f"{getattr(store, '_key', None)}.{k}"
                out[key] = hashlib.sha256(v.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
                                          + str((v.dtype, tuple(v.shape))).encode()).hexdigest()
    return out


def graph(seed: int = 0, n: int = 600, e: int = 4000, dim: int = 12):
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g).to(torch.bfloat16).float()  # low mantissa bits invariant: compressible
    x[::7, 3] = float("nan")
    x[1::5, 0] = -0.0
    x = x.view(torch.int32)
    x[2::11, 1] = 0x7fc00123  # a NaN with a payload
    x = x.view(torch.float32)
    edge_index = torch.randint(0, n, (2, e), generator=g)
    return Data(x=x, edge_index=edge_index, y=torch.randint(0, 5, (n,), generator=g), num_nodes=n)


def pyg_homo(rank, world, cache_bytes=0, codec="ibp", num_workers=0, device="cpu", device_cache_bytes=0):
    from ibp_graph.data.shards import ShardLayout, shard_of
    from ibp_graph.data.store import EncodedTable
    from ibp_graph.loaders.pyg import CompressedNeighborLoader
    from ibp_graph.pipeline.sharded import ShardedSource

    data = graph()
    store = EncodedTable.encode(data.x, codec, progress=False)
    layout = ShardLayout.contiguous(data.num_nodes, world)
    sharded = data.clone()
    sharded.x = ShardedSource(shard_of(store, layout, rank), layout, cache_bytes=cache_bytes,
                              device_cache_bytes=device_cache_bytes, timeout=60)
    kw = dict(num_neighbors=[4, 3], batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(1),
              rank=rank, world_size=world, codec=codec, num_workers=num_workers, device=device)
    ours = CompressedNeighborLoader(sharded, **kw)
    kw["generator"] = torch.Generator().manual_seed(1)
    ref = CompressedNeighborLoader(data, **kw)
    return built(ours, ref)


def hetero_graph(seed: int = 0):
    from torch_geometric.data import HeteroData

    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["paper"].x = graph(seed, n=500).x
    data["paper"].y = torch.randint(0, 4, (500,), generator=g)
    data["author"].x = torch.randn(300, 6, generator=g).to(torch.float64)
    data["author"].x[::9, 2] = 5e-324  # a subnormal
    data["paper", "cites", "paper"].edge_index = torch.randint(0, 500, (2, 3000), generator=g)
    data["author", "writes", "paper"].edge_index = torch.stack([torch.randint(0, 300, (1500,), generator=g),
                                                                torch.randint(0, 500, (1500,), generator=g)])
    data["paper", "rev_writes", "author"].edge_index = data["author", "writes", "paper"].edge_index.flip(0)
    return data


def pyg_hetero(rank, world, cache_bytes=0, codec="ibp", num_workers=0, device="cpu", device_cache_bytes=0):
    from ibp_graph.data.shards import ShardLayout, shard_of
    from ibp_graph.data.store import EncodedTable
    from ibp_graph.loaders.pyg import CompressedNeighborLoader
    from ibp_graph.pipeline.sharded import ShardedSource

    data = hetero_graph()
    sharded = data.clone()
    for t in ("paper", "author"):
        store = EncodedTable.encode(data[t].x, codec, progress=False)
        layout = ShardLayout.contiguous(data[t].num_nodes, world)
        sharded[t].x = ShardedSource(shard_of(store, layout, rank), layout, cache_bytes=cache_bytes,
                                     device_cache_bytes=device_cache_bytes, timeout=60)
    kw = dict(num_neighbors=[4, 3], batch_size=48, shuffle=True, generator=torch.Generator().manual_seed(1),
              rank=rank, world_size=world, codec=codec, input_nodes="paper", num_workers=num_workers,
              device=device)
    ours = CompressedNeighborLoader(sharded, **kw)
    kw["generator"] = torch.Generator().manual_seed(1)
    ref = CompressedNeighborLoader(data, **kw)
    return ours, ref


def pyg_link(rank, world):
    """PyG's LinkNeighborLoader over a sharded table: the seed edges' endpoints and their neighbours."""
    from ibp_graph.data.shards import ShardLayout, shard_of
    from ibp_graph.data.store import EncodedTable
    from ibp_graph.loaders.pyg import CompressedLinkNeighborLoader
    from ibp_graph.pipeline.sharded import ShardedSource

    data = graph()
    store = EncodedTable.encode(data.x, "ibp", progress=False)
    layout = ShardLayout.contiguous(data.num_nodes, world)
    sharded = data.clone()
    sharded.x = ShardedSource(shard_of(store, layout, rank), layout, timeout=60)
    kw = dict(num_neighbors=[3, 2], batch_size=32, shuffle=True, neg_sampling="binary",
              edge_label_index=data.edge_index[:, :1000], rank=rank, world_size=world, codec="ibp")
    ours = CompressedLinkNeighborLoader(sharded, generator=torch.Generator().manual_seed(2), **kw)
    ref = CompressedLinkNeighborLoader(data, generator=torch.Generator().manual_seed(2), **kw)
    return ours, ref


def uneven(rank, world):
    """Rank 1 takes one batch more than rank 0 (its own seeds, not a rank= split): both raise at once."""
    from ibp_graph.data.shards import ShardLayout, shard_of
    from ibp_graph.data.store import EncodedTable
    from ibp_graph.loaders.pyg import CompressedNeighborLoader
    from ibp_graph.pipeline.sharded import ShardedSource

    data = graph()
    store = EncodedTable.encode(data.x, "ibp", progress=False)
    layout = ShardLayout.contiguous(data.num_nodes, world)
    data.x = ShardedSource(shard_of(store, layout, rank), layout, timeout=60)
    seeds = torch.arange(64 * (rank + 1))
    return built(CompressedNeighborLoader(data, num_neighbors=[3], batch_size=64, input_nodes=seeds, codec="ibp"), [])


def other_shard(rank, world, holds):
    """Rank r opens rank holds(r)'s shard from disk (rank 0 writes the shards first), e.g. load_shard(d,
    LOCAL_RANK) on hosts of one rank each: an even split gives every shard the same rows count, so only the
    rank the shard records tells them apart. Refused on every rank at the first batch."""
    import torch.distributed as dist

    from ibp_graph.data.shards import load_shard, write_shards
    from ibp_graph.data.store import EncodedTable
    from ibp_graph.loaders.pyg import CompressedNeighborLoader
    from ibp_graph.pipeline.sharded import ShardedSource

    data = graph()
    d = os.path.join(sys.argv[5], "shards")
    if rank == 0:
        write_shards(EncodedTable.encode(data.x, "ibp", progress=False), world, d, progress=False)
    dist.barrier()
    shard, layout = load_shard(d, holds(rank), world_size=world)
    data.x = ShardedSource(shard, layout, timeout=60)  # the rank: torch.distributed's, at the first batch
    seeds = torch.arange(128)
    return CompressedNeighborLoader(data, num_neighbors=[3], batch_size=64, input_nodes=seeds, codec="ibp"), []


def dies(rank, world):
    """Rank 1 dies after its first batch; rank 0 goes on and must get ShardExchangeError, not hang."""
    ours, ref = pyg_homo(rank, world)
    if rank == 1:
        next(iter(ours))
        os._exit(3)
    return ours, ref


def mismatch(rank, world):
    """Rank 1's shard is encoded with another codec than rank 0's: refused at the first batch."""
    return pyg_homo(rank, world, codec="ibp" if rank == 0 else "identity")


def bad_ids(rank, world):
    """Rank 1 asks rank 0 for a row its shard does not have: rank 0 refuses, naming rank 1."""
    ours, ref = pyg_homo(rank, world)
    x = ours.data.x
    x.prepare("cpu")
    asked = np.array([10**6] if rank == 1 else [], np.int64)
    x.exchange.rows(x.shard, asked, np.array([asked.size, 0]), "x")
    return ours, ref


def corrupt(rank, world):
    """Rank 1 sends row lengths longer than a row: rank 0 refuses what it received."""
    from ibp_graph.layout.rows import offsets_from_lengths

    ours, ref = pyg_homo(rank, world, codec="ibp")
    x = ours.data.x
    if rank == 1:
        real = x.shard.index_select

        def index_select(rows, empty=None):
            ct = real(rows, empty)
            if ct.n_rows == 0 or ct.offsets is None:
                return ct
            lengths = ct.row_lengths().numpy().copy()
            lengths[0] = ct.row_nbytes + 1
            offsets, padded = offsets_from_lengths(lengths)
            return dataclasses.replace(ct, payload=torch.zeros(padded, dtype=torch.uint8),
                                       offsets=torch.from_numpy(offsets))
        x.shard.index_select = index_select
    return ours, ref


def corrupt_received(rank, world):
    """Rank 1 sends sound row lengths, but rank 0's copy is damaged on the way (one length -3): sized by it, the
    bytes would not pair (gloo aborts a process sent more than it expects), so rank 0 must find it before any byte
    is sent, and say so: both ranks raise at that batch, naming rank 0."""
    ours, ref = pyg_homo(rank, world, codec="ibp")
    if rank == 0:
        ex = ours.data.x.exchange
        real = ex._lengths

        def _lengths(*args, **kwargs):
            got = real(*args, **kwargs)
            if got is not None and got.numel():  # rank 0 asks nothing of itself: the first is rank 1's
                got = got.clone()
                got[0] = -3
            return got
        ex._lengths = _lengths
    return ours, ref


def dies_then_close(rank, world):
    """`dies`, then rank 0 closes its source (as a run that raised does): at once, without raising (no close
    message to a dead rank), the exchange's group and its threads gone."""
    ours, ref = dies(rank, world)

    def close():
        import gc

        gc.collect()
        x, before, t = ours.data.x, threads(), time.monotonic()
        try:
            x.close()
            raised = None
        except Exception as e:  # noqa: BLE001 - the test reads it
            raised = f"{type(e).__name__}: {e}"
        EXTRA["close"] = {"raised": raised, "seconds": time.monotonic() - t, "threads": [before, threads()],
                          "broken": getattr(x.exchange, "broken", None), "closed": x.closed}
    AFTER_ERROR.append(close)
    return ours, ref


def leaves(rank, world):
    """Rank 1 closes its source locally after its first batch (as its run would on an error of its own) and stays
    alive: rank 0's next exchange fails at once on the closed connections, not at the timeout (60 s) nor when rank 1
    exits (12 s later)."""
    ours, ref = pyg_homo(rank, world)
    if rank == 1:
        batches = iter(ours)
        next(batches)
        t = time.monotonic()
        ours.data.x.close(collective=False)
        EXTRA["close_seconds"], EXTRA["closed_at"] = time.monotonic() - t, time.time()
        time.sleep(12)
        raise RuntimeError("rank 1 left")
    return ours, ref


def close_vs_batch(rank, world):
    """Rank 0 closes its source (the end of its run) while rank 1 asks for a batch's rows: the close message pairs
    with the batch's row counts, and both raise at once, each naming the other (not a wait for the timeout)."""
    ours, ref = pyg_homo(rank, world)
    x = ours.data.x
    x.prepare("cpu")
    if rank == 0:
        x.close()
    else:
        x.exchange.rows(x.shard, np.array([0]), np.array([1, 0]), "x")
    return ours, ref


def serve_fails(rank, world):
    """Reading rank 1's shard fails once rows of it are asked: rank 1 sends the failure in-band with the row
    lengths, and both ranks raise at that batch, naming rank 1, instead of rank 0 waiting out the timeout."""
    ours, ref = pyg_homo(rank, world)
    if rank == 1:
        real = ours.data.x.shard.index_select

        def index_select(rows, empty=None):
            if len(rows):
                raise OSError("injected: the shard's file could not be read")
            return real(rows, empty)
        ours.data.x.shard.index_select = index_select
    return ours, ref


def threads() -> int:
    """This process's threads, gloo's and numba's too (threading.active_count counts Python's only)."""
    return len(os.listdir("/proc/self/task"))


def repeated_runs(rank, world, runs=5):
    """`runs` runs in one process, each with its own ShardedSource (its own gloo group, 3 threads) closed after
    its epoch (twice: idempotent); the process's threads after each, and what a closed source's loader raises."""
    for _ in range(runs):
        ours, ref = pyg_homo(rank, world)
        for _ in ours:
            pass
        ours.data.x.close()
        ours.data.x.close()
        EXTRA.setdefault("threads", []).append(threads())
    try:
        next(iter(ours))
    except Exception as e:
        EXTRA["closed"] = {"type": type(e).__name__, "message": str(e)}
    return pyg_homo(rank, world)


CASES = {"pyg_homo": pyg_homo, "pyg_homo_cache": lambda r, w: pyg_homo(r, w, cache_bytes=4000),
         "pyg_homo_identity": lambda r, w: pyg_homo(r, w, codec="identity"),
         "pyg_homo_workers": lambda r, w: pyg_homo(r, w, num_workers=2),
         "pyg_homo_abandon": lambda r, w: pyg_homo(r, w, num_workers=2),
         "pyg_hetero": pyg_hetero, "pyg_hetero_cache": lambda r, w: pyg_hetero(r, w, cache_bytes=3000, num_workers=2),
         # on the GPU (tests/distributed/test_sharded_gpu.py): decode on the device, the cache's two tiers
         "pyg_homo_cuda": lambda r, w: pyg_homo(r, w, cache_bytes=2000, device_cache_bytes=2000, num_workers=2,
                                                device="cuda"),
         "pyg_homo_ebp_cuda": lambda r, w: pyg_homo(r, w, codec="ebp", device="cuda"),
         "pyg_hetero_cache_cuda": lambda r, w: pyg_hetero(r, w, device_cache_bytes=3000, device="cuda"),
         "pyg_link": pyg_link, "uneven": uneven,
         "all_rank_0": lambda r, w: other_shard(r, w, lambda r: 0),
         "swapped": lambda r, w: other_shard(r, w, lambda r: w - 1 - r), "dies": dies, "mismatch": mismatch, "bad_ids": bad_ids, "corrupt": corrupt,
         "serve_fails": serve_fails, "repeated_runs": repeated_runs, "corrupt_received": corrupt_received,
         "dies_then_close": dies_then_close, "close_vs_batch": close_vs_batch, "leaves": leaves}


def main():
    case, rank, world, port, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world)
    result = {"ours": [], "ref": []}
    try:
        ours, ref = CASES[case](rank, world)
        rows = 0
        for epoch in range(2):
            # "_abandon": the first epoch is left after 3 batches (its prefetched exchanges still pair up)
            take = 3 if case.endswith("_abandon") and epoch == 0 else None
            for batch in itertools.islice(ours, take):
                result["ours"].append(digest(batch))
                rows += sum(int(s.n_id.numel()) for s in batch.node_stores)
            result["ref"] += [digest(b) for b in itertools.islice(ref, take)]
        result["stats"], result["x_rows"] = ours.stats.as_dict(), rows
        x = ours.data.x if hasattr(ours.data, "x") else ours.data["paper"].x
        result["row_nbytes"] = x.shard.compressed.row_nbytes
    except Exception as e:  # the test reads what this rank raised
        result["error"] = {"type": type(e).__name__, "message": str(e), "at": time.time()}
    if "error" in result:  # once the error is dropped (its traceback's frames no longer hold what it met)
        for after in AFTER_ERROR:
            after()
    result.update(EXTRA, built_at=BUILT_AT[0] if BUILT_AT else None)
    path = os.path.join(out, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)
    if "error" in result:
        os._exit(0)  # the others learn of it from the closed connection
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
