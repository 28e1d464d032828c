"""Sharded feature tables benchmark: rows fetched from other ranks raw (identity) or compressed (auto).

The script starts `--ranks` processes itself (torch.distributed, gloo on 127.0.0.1, a free port). Each
builds the same papers-like graph (benchmarks.graphs: power-law in-degrees, 128-d float32 averaged word
vectors like ogbn-papers100M's, on which `auto` picks EBP at ~0.82 of the raw bytes), keeps its
contiguous shard of the feature table (data.shards) and iterates a CompressedNeighborLoader over
``({"x": ShardedSource, "y": labels}, graph)`` with its equal share of the seeds, for each variant:

- ``identity``: the shards encoded with the identity codec: raw rows over the same exchange path;
- ``auto``: the shards encoded with `auto` (IBP or EBP per table, whichever is smaller);
- ``auto-cache``: `auto` plus a host cache of the hottest remote rows (by in-degree, set by the loader),
  `--cache-fraction` of the remote part of the table's compressed bytes.

Variants are timed in `--rounds` interleaved rounds (the order reversed every other round), each round a
warm-up batch (set-up, cache fill, worker start) and then `--batches` batches between two barriers; a
round's batches/s is `batches` over the slowest rank's wall time, a row gives the median over rounds.
Bytes are loader.stats.shard's per timed batch and rank (rank 0's in the table, every rank's in the
JSON): feature bytes received (row bytes and row lengths), the raw bytes of the rows received (identity
receives exactly these), the local-row fraction and the cache hit rate of remote rows.

Network: by default the namespace the script runs in (unlimited loopback). ``--limit 1gbit``
re-executes the script inside a private network namespace of its own (``unshare -n``) whose loopback is
rate-limited with ``tc qdisc add dev lo root tbf rate 1gbit burst 1mb latency 100ms``: all traffic is
on 127.0.0.1 inside that namespace; the JSON records the limit and tc's description of the qdisc.

DistDGL (``--distdgl``, in an environment where dgl imports; see benchmarks.distdgl): DGL's own
DistNodeDataLoader on the same graph, features, fan-outs and batch size, partitioned by
dgl.distributed.partition_graph, one server and one trainer per partition on the same loopback. Its
column is batches/s and raw feature bytes; where it cannot run, the reason is printed and recorded.

The run ends with one line ``auto/identity batches/s: X`` (median rounds), for scripts to read.

    python scripts/bench_sharded.py --ranks 2 --limit 1gbit --out bench_out/sharded_1gbit.json
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

from ..tables import report_results
from .ranks import FAMILY, build, free_port, launch
from .args import fan_out, nonnegative_int, out_file, positive_float, positive_int

VARIANTS = ("identity", "auto", "auto-cache")
COLUMNS = [
    ("variant", "variant", "s"), ("batches_per_s", "batches/s", ".2f"), ("best_batches_per_s", "best", ".2f"),
    ("vs_identity", "vs identity", ".3f"), ("wire_mb_per_batch", "MB wire/batch", ".3f"),
    ("raw_mb_per_batch", "MB raw/batch", ".3f"), ("wire_vs_identity", "wire vs identity", ".3f"),
    ("local_fraction", "local rows", ".3f"), ("hit_rate", "cache hits", ".3f"),
    ("cache_mb", "cache MB", ".1f"),
]
#: rank processes' environment variable naming the rate a re-executed script runs under (``--limit``).
LIMIT_ENV = "IBP_BENCH_SHARDED_LIMIT"
RATE = re.compile(r"^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit|tbit)$")


def threads_per_rank(ranks: int) -> int:
    """numba / torch threads of each rank process: the cores shared out (at least one)."""
    return max(1, (os.cpu_count() or 1) // ranks)


def _check_rows(batch, base) -> None:
    """A batch's features are the table's rows at its n_id (row i is base[i % len(base)]), bit for bit."""
    import torch

    want = base[batch.n_id % base.shape[0]]
    if not torch.equal(batch.x.view(torch.int32), want.view(torch.int32)):
        raise AssertionError("a sharded batch's features differ from the table's rows at batch.n_id")


def rank_main(config_path: str, rank: int) -> None:
    """One rank: build the data, time every variant's loader in rounds, write rank<R>.json next to the
    config. Environment: MASTER_ADDR / MASTER_PORT (set by `run`)."""
    import datetime

    import torch
    import torch.distributed as dist

    from ..data.shards import ShardLayout, shard_of
    from ..loaders.pyg import CompressedNeighborLoader
    from ..pipeline.sharded import ShardedSource
    from .graphs import tiled_store

    phases, t = {}, time.perf_counter()
    cfg = json.loads(Path(config_path).read_text())
    world = cfg["ranks"]
    torch.set_num_threads(cfg["threads"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=cfg["timeout"]))
    graph, base, y = build(cfg["num_nodes"], cfg["avg_degree"], cfg["base_rows"])
    phases["graph"], t = time.perf_counter() - t, time.perf_counter()
    if cfg.get("partition", "ranges") == "metis":  # deterministic (seeded): every rank computes the same parts
        from ..data.partition import metis_layout

        layout = metis_layout(graph.indptr, graph.indices, graph.num_nodes, world)
    else:
        layout = ShardLayout.contiguous(graph.num_nodes, world)
    shards, info = {}, {}
    for codec in ("identity", "auto"):
        store = tiled_store(base, graph.num_nodes, codec)
        shards[codec] = shard_of(store, layout, rank)
        info[codec] = {"codec": store.codec.name, "fraction": store.fraction, "table_mb": store.nbytes / 1e6,
                       "remote_mb": (store.nbytes - shards[codec].nbytes) / 1e6}
        del store
    cache_bytes = int(cfg["cache_fraction"] * info["auto"]["remote_mb"] * 1e6)
    phases["stores"], t = time.perf_counter() - t, time.perf_counter()
    loaders, sources = {}, {}
    for variant in cfg["variants"]:
        codec = "identity" if variant == "identity" else "auto"
        source = ShardedSource(shards[codec], layout, cache_bytes=cache_bytes if variant == "auto-cache" else 0,
                               timeout=cfg["timeout"])
        sources[variant] = source
        loaders[variant] = CompressedNeighborLoader(
            ({"x": source, "y": y}, graph), list(cfg["num_neighbors"]), batch_size=cfg["batch_size"],
            shuffle=True, generator=torch.Generator().manual_seed(0), rank=rank, world_size=world,
            codec=codec, num_workers=cfg["num_workers"], persistent_workers=cfg["num_workers"] > 0)
    phases["loaders"], started = time.perf_counter() - t, time.perf_counter()
    rounds = []
    for r in range(cfg["rounds"]):
        order = list(loaders) if r % 2 == 0 else list(loaders)[::-1]
        for variant in order:
            loader = loaders[variant]
            it = iter(loader)
            _check_rows(next(it), base)  # warm-up: set-up, cache fill, workers started
            loader.stats.reset()
            dist.barrier()
            t = time.perf_counter()
            for _ in range(cfg["batches"]):
                next(it)
            wall = time.perf_counter() - t
            del it
            s = loader.stats
            rounds.append({"round": r, "variant": variant, "seconds": wall, "batches": s.batches,
                           "shard": dict(s.shard), "local_fraction": s.local_fraction,
                           "remote_hit_rate": s.remote_hit_rate})
    phases["rounds"] = time.perf_counter() - started
    caches = {v: s.cache.nbytes if s.cache is not None else 0 for v, s in sources.items()}
    out = {"rank": rank, "num_edges": int(graph.indptr[-1]), "stores": info, "cache_bytes": cache_bytes,
           "cache_nbytes": caches, "rounds": rounds, "phase_seconds": phases}
    Path(config_path).with_name(f"rank{rank}.json").write_text(json.dumps(out))
    dist.barrier()
    del loaders
    dist.destroy_process_group()


def summarize(per_rank: list[dict], variants: Sequence[str]) -> list[dict]:
    """One row per variant: median / best over rounds of batches over the slowest rank's seconds, and rank
    0's bytes per timed batch (every rank's in `ranks`)."""
    rows = []
    for v in variants:
        rounds = [[r for r in rank["rounds"] if r["variant"] == v] for rank in per_rank]
        rates = [min(rk[i]["batches"] for rk in rounds) / max(rk[i]["seconds"] for rk in rounds)
                 for i in range(len(rounds[0]))]
        ranks = []
        for rank, rk in zip(per_rank, rounds):
            batches = sum(r["batches"] for r in rk)
            sh = {k: sum(r["shard"][k] for r in rk) for k in rk[0]["shard"]}
            n = sh["local_rows"] + sh["remote_rows"] + sh["remote_hits"]
            remote = sh["remote_rows"] + sh["remote_hits"]
            ranks.append({"rank": rank["rank"], "batches": batches, "seconds": [r["seconds"] for r in rk],
                          "wire_mb_per_batch": sh["wire_bytes"] / batches / 1e6,
                          "request_mb_per_batch": sh["request_bytes"] / batches / 1e6,
                          "raw_mb_per_batch": sh["remote_raw_bytes"] / batches / 1e6,
                          "rows_per_batch": n / batches,
                          "local_fraction": sh["local_rows"] / n if n else 0.0,
                          "hit_rate": sh["remote_hits"] / remote if remote else 0.0,
                          "cache_mb": rank["cache_nbytes"][v] / 1e6, "shard": sh})
        first = ranks[0]
        rows.append({"variant": v, "rounds": len(rates), "batches_per_s": statistics.median(rates),
                     "best_batches_per_s": max(rates), "rates": rates,
                     **{k: first[k] for k in ("wire_mb_per_batch", "raw_mb_per_batch", "request_mb_per_batch",
                                              "rows_per_batch", "local_fraction", "hit_rate", "cache_mb")},
                     "ranks": ranks})
    base = next((r for r in rows if r["variant"] == "identity"), None)
    for r in rows:
        r["vs_identity"] = r["batches_per_s"] / base["batches_per_s"] if base else None
        r["wire_vs_identity"] = r["wire_mb_per_batch"] / base["wire_mb_per_batch"] if base else None
    return rows


def network() -> dict:
    """The link this process measures: the ``--limit`` it was re-executed under (None: the namespace it was
    started in, unlimited) and tc's description of the loopback's root qdisc."""
    limit = os.environ.get(LIMIT_ENV) or None
    qdisc = None
    if shutil.which("tc"):
        done = subprocess.run(["tc", "qdisc", "show", "dev", "lo"], capture_output=True, text=True)
        qdisc = (done.stdout or done.stderr).strip()
    return {"limit": limit, "private_namespace": limit is not None, "lo_qdisc": qdisc}


def reexec_limited(rate: str, argv: Sequence[str]) -> int:
    """Run this benchmark again (`argv`) inside a private network namespace whose
    loopback is rate-limited to `rate` (tc tbf, burst 1mb, latency 100ms); its exit status."""
    if not RATE.match(rate):
        raise ValueError(f"--limit {rate!r} is not accepted; use a tc rate such as 1gbit, 500mbit, 10gbit")
    missing = [t for t in ("unshare", "ip", "tc") if shutil.which(t) is None]
    if missing:
        raise RuntimeError(f"--limit {rate} needs {missing} on PATH (util-linux unshare, iproute2 ip and tc)")
    script = (f"ip link set lo up && tc qdisc add dev lo root tbf rate {rate} burst 1mb latency 100ms "
              '&& exec "$@"')
    cmd = ["unshare", "-n", "bash", "-c", script, "bash", sys.executable, "-m", __name__, *argv]
    done = subprocess.run(cmd, env={**os.environ, LIMIT_ENV: rate})
    if done.returncode == 1 and os.environ.get(LIMIT_ENV) is None:
        print(f"(inside `unshare -n` with tc rate {rate}: see the error above; a private network namespace "
              "needs root or user namespaces)", file=sys.stderr)
    return done.returncode


def run(*, ranks: int = 2, num_nodes: int = 393_216, avg_degree: float = 15, batch_size: int = 512,
        num_neighbors: Sequence[int] = (10, 5), batches: int = 40, rounds: int = 3, num_workers: int = 1,
        cache_fraction: float = 0.2, variants: Sequence[str] = VARIANTS, distdgl: bool = False,
        dgl_part_method: str = "random", dgl_python: Optional[str] = None, timeout: float = 900,
        out: Optional[str] = "bench_out/sharded.json", partition: str = "ranges", quiet: bool = False) -> dict:
    """Time every variant on `ranks` local ranks; print the table and the ratio line, write JSON."""
    for argname, v, lo in (("ranks", ranks, 2), ("num_nodes", num_nodes, 64), ("batch_size", batch_size, 1),
                           ("batches", batches, 1), ("rounds", rounds, 1), ("num_workers", num_workers, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{argname}={v!r} is not accepted; use an int >= {lo}")
    if not 0 < cache_fraction <= 1:
        raise ValueError(f"cache_fraction={cache_fraction!r} is not accepted; use a fraction in (0, 1]")
    if partition not in ("ranges", "metis"):
        raise ValueError(f"partition={partition!r} is not accepted; use 'ranges' or 'metis'")
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        raise ValueError(f"variants={list(variants)!r} is not accepted; use some of {list(VARIANTS)}")
    threads = threads_per_rank(ranks)
    base_rows = min(65_536, num_nodes)
    num_nodes = -(-num_nodes // base_rows) * base_rows  # a whole number of tiles (benchmarks.graphs)
    per_epoch = num_nodes // ranks // batch_size  # each rank's batches per epoch (at least)
    if batches + 1 > per_epoch:
        raise ValueError(f"batches={batches} is not accepted with {num_nodes} nodes, {ranks} ranks and batch_size="
                         f"{batch_size}: a round takes a warm-up batch and `batches` more of one epoch of "
                         f"{per_epoch}; use batches <= {per_epoch - 1} or more nodes")
    cfg = {"ranks": ranks, "num_nodes": num_nodes, "avg_degree": avg_degree, "base_rows": base_rows,
           "batch_size": batch_size, "num_neighbors": list(num_neighbors), "batches": batches, "rounds": rounds,
           "num_workers": num_workers, "cache_fraction": cache_fraction, "variants": list(variants),
           "threads": threads, "timeout": timeout, "partition": partition}
    net = network()
    if not quiet:
        print(f"{ranks} ranks ({threads} thread(s) each, {num_workers} worker(s)), {num_nodes:,} nodes, "
              f"avg in-degree {avg_degree}, {FAMILY} 128-d float32, batch {batch_size}, fan-out "
              f"{list(num_neighbors)}, {rounds} round(s) of {batches} batches, shards: {partition}; network: "
              f"{net['limit'] or 'unlimited'} ({net['lo_qdisc']})", flush=True)
    env = {**os.environ, "NUMBA_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ibp-bench-sharded-") as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps(cfg))
        env["MASTER_ADDR"], env["MASTER_PORT"] = "127.0.0.1", str(free_port())
        code = "import sys; from ibp_graph.benchmarks.sharded import rank_main; rank_main(sys.argv[1], int(sys.argv[2]))"
        launch([([sys.executable, "-c", code, str(config), str(r)], env) for r in range(ranks)], timeout,
               "bench sharded")
        per_rank = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(ranks)]
    rows = summarize(per_rank, variants)
    if not quiet:
        print(f"  ranks done in {time.perf_counter() - t:.1f} s", flush=True)
    dgl_result = None
    if distdgl:
        from .distdgl import run as run_distdgl

        env["MASTER_PORT"] = str(free_port())
        dgl_result = run_distdgl({**cfg, "part_method": dgl_part_method}, env, python=dgl_python, timeout=timeout,
                                 quiet=quiet)
        if dgl_result.get("batches_per_s"):
            rows.append({"variant": "distdgl", **{k: dgl_result.get(k) for k in (
                "batches_per_s", "best_batches_per_s", "raw_mb_per_batch", "local_fraction", "rounds", "rates")},
                "wire_mb_per_batch": dgl_result.get("raw_mb_per_batch")})
            base = rows[0]["batches_per_s"] if rows[0]["variant"] == "identity" else None
            rows[-1]["vs_identity"] = rows[-1]["batches_per_s"] / base if base else None
    for r in rows:
        r["vs_distdgl"] = (r["batches_per_s"] / dgl_result["batches_per_s"]
                           if dgl_result and dgl_result.get("batches_per_s") else None)
    by = {r["variant"]: r for r in rows}
    ratio = (by["auto"]["batches_per_s"] / by["identity"]["batches_per_s"]
             if "auto" in by and "identity" in by else None)
    stores = per_rank[0]["stores"]
    title = (f"Sharded features over {ranks} ranks, network {net['limit'] or 'unlimited'}: batch {batch_size}, "
             f"fan-out {list(num_neighbors)}, {num_nodes:,} nodes; auto = {stores['auto']['codec']} at "
             f"{stores['auto']['fraction']:.4f} of raw; median of {rounds} round(s) of {batches} batches "
             "(slowest rank); bytes: rank 0's per batch")
    columns = COLUMNS + ([("vs_distdgl", "vs DistDGL", ".3f")] if dgl_result and dgl_result.get("batches_per_s")
                         else [])
    payload = {"benchmark": "sharded", **{k: v for k, v in cfg.items() if k != "variants"},
               "num_edges": per_rank[0]["num_edges"], "network": net, "stores": stores, "cache_bytes": per_rank[0]["cache_bytes"],
               "distdgl": dgl_result, "auto_vs_identity": ratio,
               "phase_seconds": [r["phase_seconds"] for r in per_rank]}
    report_results(rows, columns, title, out, payload, quiet=quiet)
    if dgl_result is not None and not dgl_result.get("batches_per_s") and not quiet:
        print(f"\nDistDGL: not run: {dgl_result.get('reason')}")
    print(f"auto/identity batches/s: {ratio:.3f}" if ratio is not None else "auto/identity batches/s: n/a")
    return {"results": rows, **payload}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line of `ibp-graph bench sharded` and scripts/bench_sharded.py."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="ibp-graph bench sharded", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=positive_int, default=2, help="rank processes (2 default; 4 allowed)")
    p.add_argument("--num-nodes", type=positive_int, default=393_216, help="nodes (rounded up to 65536-row tiles)")
    p.add_argument("--avg-degree", type=positive_float, default=15)
    p.add_argument("--batch-size", type=positive_int, default=512)
    p.add_argument("--num-neighbors", type=fan_out, nargs="+", default=[10, 5])
    p.add_argument("--batches", type=positive_int, default=40, help="timed batches per variant and round")
    p.add_argument("--rounds", type=positive_int, default=3, help="interleaved rounds (median and best)")
    p.add_argument("--num-workers", type=nonnegative_int, default=1, help="loader workers per rank")
    p.add_argument("--cache-fraction", type=float, default=0.2,
                   help="auto-cache: the cache's byte budget, this fraction of the remote rows' compressed bytes")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--limit", default=None,
                   help="run inside a private network namespace whose loopback tc limits to this rate "
                        "(e.g. 1gbit); default: unlimited")
    p.add_argument("--distdgl", action="store_true",
                   help="also time DistDGL's DistNodeDataLoader (needs dgl importable here)")
    p.add_argument("--dgl-part-method", default="random", choices=["random", "metis"],
                   help="--distdgl: partition_graph's part_method")
    p.add_argument("--dgl-python", default=None,
                   help="--distdgl: the Python of an environment with dgl (default: this one)")
    p.add_argument("--timeout", type=positive_float, default=900, help="seconds for each multi-process run")
    p.add_argument("--partition", default="ranges", choices=["ranges", "metis"],
                   help="which rank holds which rows: contiguous ranges (default) or METIS parts (pymetis)")
    p.add_argument("--out", type=out_file, default="bench_out/sharded.json", help="JSON output path")
    a = p.parse_args(argv)
    if a.limit is not None and not RATE.match(a.limit):
        p.error(f"--limit {a.limit!r} is not accepted; use a tc rate such as 1gbit, 500mbit, 10gbit")
    if a.limit is not None and os.environ.get(LIMIT_ENV) != a.limit:
        return reexec_limited(a.limit, argv)  # the same arguments, inside the namespace
    if a.ranks not in (2, 3, 4):
        raise SystemExit(f"--ranks {a.ranks} is not accepted; use 2, 3 or 4 (this benchmark runs all ranks "
                         "on one host)")
    run(ranks=a.ranks, num_nodes=a.num_nodes, avg_degree=a.avg_degree, batch_size=a.batch_size,
        num_neighbors=a.num_neighbors, batches=a.batches, rounds=a.rounds, num_workers=a.num_workers,
        cache_fraction=a.cache_fraction, variants=a.variants, distdgl=a.distdgl,
        dgl_part_method=a.dgl_part_method, dgl_python=a.dgl_python, timeout=a.timeout, out=a.out,
        partition=a.partition)
    return 0


if __name__ == "__main__":
    sys.exit(main())
