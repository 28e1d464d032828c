"""One rank of the sharded DGL tests (tests/distributed/test_sharded_dgl.py runs it once per rank).

`python dgl_ranks.py CASES RANK WORLD PORT OUT` (CASES: names of `case`, comma-separated) writes
OUT/rankR.json, per case: the SHA-256 of every tensor of every batch (input and output nodes, every
block's src/dst/edge ids and columns) of CompressedDGLDataLoader with node features in ShardedSources,
and of the single-host loader (the whole encoded tables) on the same graph, given the same seeds and the
same DDP split of them (use_ddp, ddp_seed); the sharded loader's rows checked against the raw tables
bit for bit; the loader stats and the number of sharded rows its batches read, per node type."""
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("DGLBACKEND", "pytorch")
import dgl  # noqa: E402

from tests.loaders.test_dgl import make_graph, seed_all  # noqa: E402 (seed_all: numpy, torch, dgl; one thread)
from tests.loaders.test_dgl_hetero import make_hetero  # noqa: E402


def features(n: int, dim: int, seed: int) -> torch.Tensor:
    """float32 rows naming their node (column 0), with the bits a loader must keep: NaN payloads, -0.0,
    subnormals, infinities."""
    g = torch.Generator().manual_seed(seed)
    x = torch.arange(n, dtype=torch.float32).unsqueeze(1).repeat(1, dim)
    x[:, 1:] = torch.randint(0, 4, (n, dim - 1), generator=g).float() * 0.25  # compressible
    x[::7, 2] = -0.0
    x[::61, 3] = 1e-42  # subnormal
    x[::67, 4] = float("-inf")
    bits = x.view(torch.int32)
    bits[2::53, 5] = 0x7fc00123  # a quiet NaN with a payload
    bits[3::71, 6] = 0x7f800001  # a signalling NaN with a payload
    bits[5::59, 7] = -0x003fff00  # 0xffc00100: a negative NaN with a payload
    return bits.view(torch.float32)


#: feature widths per node type (the homogeneous graph's: 16); tables of 64 KiB and more, which codec "auto"
#: compresses (field's is small: identity)
DIMS = {"paper": 48, "author": 72, "field": 8}


def graph_and_tables(kind: str):
    """(the graph of tests/loaders' DGL tests without its features, {ntype: raw feature table}): the loaders
    read features from the tables alone (a rank holds no whole table); the labels stay in the graph."""
    g = make_graph() if kind == "homo" else make_hetero()
    raw = {}
    for i, t in enumerate(g.ntypes):
        g.nodes[t].data.pop("feat", None)  # a frame without the column (make_hetero's field has none)
        raw[t] = features(g.num_nodes(t), DIMS.get(t, 16), 10 + i)
    return g, raw


def sha(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's bytes, dtype and shape."""
    t = t.detach().cpu()
    t = torch.empty(t.shape, dtype=t.dtype).copy_(t)  # dense (an empty or expanded tensor may have stride 0)
    return hashlib.sha256(t.view(-1).view(torch.uint8).numpy().tobytes()
                          + str((t.dtype, tuple(t.shape))).encode()).hexdigest()


def per_type(x, name: str) -> dict:
    return {f"{name}[{k!r}]": sha(v) for k, v in x.items()} if isinstance(x, dict) else {name: sha(x)}


def graph_digest(g, where: str) -> dict:
    """Every edge type's (src, dst, edge id) and every node and edge column of a block or graph."""
    out = {}
    for et in g.canonical_etypes:
        src, dst, eid = g.edges(form="all", etype=et, order="eid")
        out.update({f"{where}.edges[{et}].{k}": sha(v) for k, v in (("src", src), ("dst", dst), ("eid", eid))})
        out.update({f"{where}.edata[{et}][{k!r}]": sha(v) for k, v in g.edges[et].data.items()})
    sides = (("srcnodes", g.srctypes), ("dstnodes", g.dsttypes)) if g.is_block else (("nodes", g.ntypes),)
    for side, types in sides:
        for t in types:
            view = getattr(g, side)[t]
            out[f"{where}.{side}[{t!r}].num"] = str(len(view))
            out.update({f"{where}.{side}[{t!r}][{k!r}]": sha(v) for k, v in view.data.items()})
    return out


def digest(batch) -> dict:
    """SHA-256 of everything a node-wise (input_nodes, output_nodes, blocks) or edge-wise (input_nodes,
    pair_graph, [neg_pair_graph,] blocks) batch holds."""
    out = per_type(batch[0], "input_nodes")
    if isinstance(batch[1], dgl.DGLGraph):
        for i, g in enumerate(batch[1:-1]):
            out.update(graph_digest(g, ("pair_graph", "neg_pair_graph")[i]))
    else:
        out.update(per_type(batch[1], "output_nodes"))
    for i, b in enumerate(batch[-1]):
        out.update(graph_digest(b, f"blocks[{i}]"))
    return out


def check_rows(batch, raw: dict, rows: dict) -> None:
    """Count into `rows` (by node type) the sharded rows a batch's first block reads (srcdata 'feat'), each
    checked bit for bit against the `raw` table at the block's node ids (AssertionError otherwise)."""
    b = batch[-1][0]
    for t in b.srctypes:
        if t in raw:
            got, want = b.srcnodes[t].data["feat"], raw[t][b.srcnodes[t].data[dgl.NID]]
            assert torch.equal(got.view(torch.int32), want.view(torch.int32)), f"feat rows of {t!r} differ"
            rows[t] = rows.get(t, 0) + got.shape[0]


def tables(raw: dict, codec, rank, world, cache_bytes=0):
    """({ntype: {"feat": ShardedSource}}: this rank's shard of every `raw` table, encoded,
    {ntype: {"feat": EncodedTable}}: the whole encoded tables)."""
    from ibp_graph.data.shards import ShardLayout, shard_of
    from ibp_graph.data.store import EncodedTable
    from ibp_graph.pipeline.sharded import ShardedSource

    sharded, whole = {}, {}
    for t, x in raw.items():
        store = EncodedTable.encode(x, codec, progress=False)
        layout = ShardLayout.contiguous(x.shape[0], world)
        sharded[t] = {"feat": ShardedSource(shard_of(store, layout, rank), layout, cache_bytes=cache_bytes,
                                            timeout=60)}
        whole[t] = {"feat": store}
    return sharded, whole


def loaders(kind, codec, num_workers, rank, world, cache_bytes=0, link=False):
    """(sharded loader, single-host loader with the whole tables, the raw tables), on one graph."""
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    g, raw = graph_and_tables("homo" if kind == "homo" else "hetero")
    stores, whole = tables(raw, codec, rank, world, cache_bytes)
    if kind == "homo":
        make = lambda: dgl.dataloading.NeighborSampler([4, 3], prefetch_node_feats=["feat"],  # noqa: E731
                                                       prefetch_labels=["label"])
        stores, whole = stores["_N"], whole["_N"]
        indices = torch.arange(0, g.num_nodes(), 2)
        if link:
            indices = torch.arange(0, g.num_edges(), 5)
            base = make
            make = lambda: dgl.dataloading.as_edge_prediction_sampler(  # noqa: E731
                base(), negative_sampler=dgl.dataloading.negative_sampler.Uniform(2))
    elif kind == "hetero":  # two hops from seeds of two types
        make = lambda: dgl.dataloading.NeighborSampler(  # noqa: E731
            [3, 2], prefetch_node_feats={t: ["feat"] for t in g.ntypes}, prefetch_labels={"paper": ["label"]})
        indices = {"paper": torch.arange(0, g.num_nodes("paper"), 3), "field": torch.arange(g.num_nodes("field"))}
    else:  # "hetero1": one hop; DDP gives rank 0 field seeds only (no author in its batches), rank 1 authors too
        make = lambda: dgl.dataloading.NeighborSampler(  # noqa: E731
            [3], prefetch_node_feats={t: ["feat"] for t in g.ntypes})
        indices = {"field": torch.arange(g.num_nodes("field")), "author": torch.arange(0, g.num_nodes("author"), 50)}
    kw = dict(use_ddp=True, ddp_seed=7, batch_size={"homo": 48, "hetero": 24, "hetero1": 4}[kind], shuffle=True,
              num_workers=num_workers, codec=codec)
    ours = CompressedDGLDataLoader(g, indices, make(), node_stores=stores, **kw)
    ref = CompressedDGLDataLoader(g, indices, make(), node_stores=whole, **kw)
    return ours, ref, raw


def case(name: str) -> dict:
    """The arguments of `loaders` a case names: KIND-CODEC-wWORKERS[-cache][-link] (KIND: homo, hetero or
    hetero1, see `loaders`), e.g. homo-auto-w2, hetero-identity-w0-cache, homo-auto-w0-link."""
    kind, codec, workers, *extra = name.split("-")
    return dict(kind=kind, codec=codec, num_workers=int(workers[1:]), cache_bytes=3000 if "cache" in extra else 0,
                link="link" in extra)


def run(name: str, rank: int, world: int) -> dict:
    """One case: two epochs of the sharded loader and of the single-host one, each epoch seeded alike."""
    ours, ref, raw = loaders(rank=rank, world=world, **case(name))
    result = {"ours": [], "ref": [], "rows": {}}
    for epoch in range(2):
        for loader, key in ((ours, "ours"), (ref, "ref")):
            seed_all(100 + epoch)
            for batch in loader:
                result[key].append(digest(batch))
                if key == "ours":
                    check_rows(batch, raw, result["rows"])
    result["stats"] = ours.stats.as_dict()
    result["shard"] = dict(ours.stats.shard)
    return result


def main():
    names, rank, world, port, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        results = {name: run(name, rank, world) for name in names.split(",")}  # in this order on every rank
        Path(out, f"rank{rank}.json").write_text(json.dumps(results))
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
