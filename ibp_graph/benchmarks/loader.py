"""Loader benchmark: batches/s, bytes per batch and stage times, ibp vs identity vs pre-encoded stores.

All variants run in one process on the same generated graph, the same seeds and the
same worker count, so their ratios are meaningful on a shared machine.
"""
from __future__ import annotations

import argparse
import time
from typing import Optional, Sequence, Union

import numpy as np
import torch

from ..data.store import EncodedTable
from ..data.synthetic import make_family
from ..tables import format_table, report_results, write_json
from .args import device, fan_out, nonnegative_int, out_file, positive_int

#: "auto-store-no-eid": auto-store with edge_ids=False (batches without e_id, as ibp-graph train's)
VARIANTS = ("identity", "ibp", "ibp-store", "auto-store", "auto-store-no-eid")
#: on a GPU also: features already resident in GPU memory (no transfer at all), the ceiling.
GPU_VARIANTS = VARIANTS + ("resident",)
COLUMNS = [
    ("variant", "variant", "s"), ("batches_per_s", "batches/s", ".2f"),
    ("speedup", "vs identity", ".3f"), ("mb_per_batch", "MB sent/batch", ".2f"),
    ("raw_mb_per_batch", "MB raw/batch", ".2f"), ("fraction", "fraction", ".4f"),
    ("copied_mb_per_batch", "MB copied/batch", ".2f"),
    ("sample_ms", "sample ms", ".1f"), ("gather_ms", "gather ms", ".1f"),
    ("encode_ms", "encode ms", ".1f"), ("copy_ms", "copy ms", ".2f"), ("decode_ms", "decode ms", ".1f"),
]


def power_law_graph(num_nodes: int, avg_degree: int, seed: int = 0) -> torch.Tensor:
    """edge_index with Zipf-like source popularity (a few hubs, many leaves), uniform targets."""
    rng = np.random.default_rng(seed)
    e = num_nodes * avg_degree
    src = (rng.pareto(1.2, e) * num_nodes / 50).astype(np.int64) % num_nodes
    dst = rng.integers(0, num_nodes, e)
    return torch.from_numpy(np.stack([src, dst]))


def cpu_seconds() -> float:
    """CPU seconds used so far by this process and its live children (DataLoader workers);
    nan without psutil. Per batch, a measure of work that a shared machine's load bends less
    than wall time."""
    try:
        import psutil
    except ImportError:
        return float("nan")
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:  # exited meanwhile
            pass
    return total


def time_batches(loader, batches: int, use, device: str = "cpu", skip: int = 1) -> tuple[int, float, float]:
    """(batches taken, seconds, CPU seconds of this process and its workers: cpu_seconds) of up
    to `batches` batches after the first `skip` (the first starts the workers; more drain the
    batches workers queued ahead, so the window sees the steady state), calling use(batch) on
    each; the loader's stats count only those."""
    it = iter(loader)
    for _ in range(skip):
        next(it)
    if hasattr(loader, "stats"):
        loader.stats.reset()
    cpu = cpu_seconds()
    t = time.perf_counter()
    n = 0
    for _ in range(batches):
        batch = next(it, None)
        if batch is None:
            break
        use(batch)
        n += 1
    if device != "cpu":
        torch.cuda.synchronize()
    return n, time.perf_counter() - t, cpu_seconds() - cpu


def run(*, num_nodes: int = 200_000, avg_degree: int = 15, batch_size: int = 512,
        num_neighbors: Sequence[int] = (10, 5), batches: int = 30, num_workers: int = 1,
        device: str = "cpu", out: Optional[str] = "bench_out/loader.json", quiet: bool = False) -> list[dict]:
    """Time `batches` batches of each variant; print the table, write JSON."""
    from torch_geometric.data import Data

    from ..loaders.pyg import CompressedNeighborLoader

    t = time.perf_counter()
    x = make_family("embedding_f32", num_nodes)
    y = torch.randint(0, 172, (num_nodes,), generator=torch.Generator().manual_seed(0))
    edge_index = power_law_graph(num_nodes, avg_degree)
    # pre-encoded feature stores: IBP, and what fit_codec picks (the default of prepare)
    stores = {v: EncodedTable.encode(x, v.split("-")[0], progress=False)
              for v in ("ibp-store", "auto-store")}
    if not quiet:
        print(f"graph: {num_nodes:,} nodes, {edge_index.shape[1]:,} edges, x {tuple(x.shape)} float32 "
              f"(store fraction: ibp {stores['ibp-store'].fraction:.4f}, auto "
              f"{stores['auto-store'].codec.name} {stores['auto-store'].fraction:.4f}); built in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
    rows = []
    x_dev = x.to(device) if device != "cpu" else None
    for variant in (GPU_VARIANTS if device != "cpu" else VARIANTS):
        base = variant.removesuffix("-no-eid")  # the same loader without edge ids
        features = {**stores, "resident": None}.get(base, x)
        data = Data(y=y, edge_index=edge_index, num_nodes=num_nodes)
        if features is not None:
            data.x = features
        codec = {"identity": "identity", "resident": "identity", "auto-store": "auto"}.get(base, "ibp")
        torch.manual_seed(0)
        loader = CompressedNeighborLoader(data, list(num_neighbors), batch_size=batch_size, shuffle=True,
                                          num_workers=num_workers, codec=codec, device=device,
                                          persistent_workers=num_workers > 0, edge_ids=base == variant)
        def use(batch):
            if variant == "resident":
                batch.x = x_dev.index_select(0, batch.n_id)  # gathered where it already lives

        n, wall, _ = time_batches(loader, batches, use, device)
        s = loader.stats
        per = max(s.batches, 1)
        rows.append({
            "variant": variant, "batches": n, "seconds": wall, "batches_per_s": n / wall,
            "mb_per_batch": s.total_sent_bytes / per / 1e6, "raw_mb_per_batch": s.total_raw_bytes / per / 1e6,
            "fraction": s.fraction, "copied_mb_per_batch": s.copied_bytes_per_batch / 1e6, **{f"{k}_ms": s.seconds.get(k, 0.0) / per * 1e3
                                       for k in ("sample", "gather", "encode", "copy", "decode")},
        })
        if not quiet:
            print(f"  {variant}: {n / wall:.2f} batches/s", flush=True)
    base = rows[0]["batches_per_s"]
    for r in rows:
        r["speedup"] = r["batches_per_s"] / base
    title = (f"CompressedNeighborLoader, batch {batch_size}, fan-out {list(num_neighbors)}, {num_workers} "
             f"worker(s), device {device}; worker stage times are per batch per worker")
    report_results(rows, COLUMNS, title, out,
                   {"benchmark": "loader", "num_nodes": num_nodes, "avg_degree": avg_degree,
                    "batch_size": batch_size, "num_neighbors": list(num_neighbors), "num_workers": num_workers,
                    "device": device}, quiet=quiet)
    return rows


#: the loaders `run_dgl` times, in this order: DGL's own DataLoader, CompressedNeighborLoader with
#: codec identity (when torch_geometric imports: it is not in the DGL environment), and
#: CompressedDGLDataLoader with DGL's sampler: codec identity, auto, and auto from a pre-encoded
#: store (`node_stores`).
DGL_VARIANTS = ("dgl-DataLoader", "pyg-identity", "dgl-identity", "dgl-auto", "dgl-auto-store")
#: `run_dgl`'s tasks: node batches (NeighborSampler), or link batches (as_edge_prediction_sampler over
#: it: seed edges, one uniform negative per edge, the seed edges excluded); no PyG loader for the latter.
TASKS = ("node", "link")


def _have_pyg() -> bool:
    try:
        import torch_geometric  # noqa: F401
    except ImportError:
        return False
    return True


def _dgl_loaders(g, x, y, edge_index, *, variants, workers: int, batch_size: int,
                 num_neighbors: Sequence[int], task: str = "node") -> dict:
    """{variant: (loader, use)} on one graph, seeds and fan-out (seed nodes, or seed edges with `task`
    "link"); `use` checks a batch's features."""
    import dgl

    from ..data.store import EncodedTable
    from ..loaders.dgl import CompressedDGLDataLoader

    num_nodes = g.num_nodes()
    out = {}
    for variant in variants:
        torch.manual_seed(0)
        if variant == "pyg-identity":
            from torch_geometric.data import Data

            from ..loaders.pyg import CompressedNeighborLoader

            loader = CompressedNeighborLoader(
                Data(x=x, y=y, edge_index=edge_index, num_nodes=num_nodes), list(num_neighbors),
                batch_size=batch_size, shuffle=True, num_workers=workers, codec="identity", device="cpu",
                persistent_workers=workers > 0)
            out[variant] = (loader, lambda b, v=variant: b.x.shape[0] == b.n_id.shape[0] or _undelivered(v))
            continue
        # PyG lists fan-outs from the seeds outwards, DGL from the input layer to the seeds
        sampler = dgl.dataloading.NeighborSampler(list(reversed(num_neighbors)),
                                                  prefetch_node_feats=["x"], prefetch_labels=["y"])
        seeds = torch.arange(num_nodes)
        if task == "link":
            sampler = dgl.dataloading.as_edge_prediction_sampler(
                sampler, exclude="self", negative_sampler=dgl.dataloading.negative_sampler.Uniform(1))
            seeds = torch.arange(g.num_edges())
        cls = dgl.dataloading.DataLoader if variant == "dgl-DataLoader" else CompressedDGLDataLoader
        kw = {} if variant == "dgl-DataLoader" else {"codec": variant.split("-")[1]}
        if variant == "dgl-auto-store":
            kw["node_stores"] = {"x": EncodedTable.encode(x, "auto", progress=False)}
        loader = cls(g, seeds, sampler, batch_size=batch_size, shuffle=True,
                     num_workers=workers, persistent_workers=workers > 0, **kw)
        out[variant] = (loader, lambda b, v=variant: b[-1][0].srcdata["x"].shape[0] == b[0].shape[0] or _undelivered(v))
    return out


def _undelivered(variant: str):
    raise AssertionError(f"{variant}: a batch's features do not match its input nodes")


def run_dgl(*, num_nodes: int = 200_000, avg_degree: int = 15, batch_size: int = 512,
            num_neighbors: Sequence[int] = (10, 5), batches: int = 30,
            num_workers: Union[int, Sequence[int]] = 1, rounds: int = 1, task: str = "node",
            quiet: bool = False) -> list[dict]:
    """DGL's own DataLoader against our loaders (DGL_VARIANTS) on `run`'s graph and features, the
    same seeds and fan-out, for each worker count, CPU only, all in this one process (ratios
    comparable on a shared machine); needs dgl (DGLBACKEND=pytorch). `task` (TASKS): node batches,
    or link batches (edge-wise sampling with negatives; no PyG row).

    Each of `rounds` times `batches` batches of every loader in turn (after draining what its
    workers queued ahead), so that a machine's changing load hits all loaders alike; a row gives
    the median and best batches/s over the rounds, its median's ratio to DGL's DataLoader, CPU
    ms per batch (main process and workers), the feature bytes per batch our loaders send and
    gather (raw: what DGL's DataLoader moves) and the host bytes they copy."""
    import statistics

    import dgl

    if task not in TASKS:
        raise ValueError(f"task={task!r} is not accepted; use one of {TASKS}")

    counts = [num_workers] if isinstance(num_workers, int) else list(num_workers)
    x = make_family("embedding_f32", num_nodes)
    y = torch.randint(0, 172, (num_nodes,), generator=torch.Generator().manual_seed(0))
    edge_index = power_law_graph(num_nodes, avg_degree)
    g = dgl.graph((edge_index[0], edge_index[1]), num_nodes=num_nodes)
    g.ndata["x"], g.ndata["y"] = x, y
    variants = [v for v in DGL_VARIANTS if v != "pyg-identity" or (_have_pyg() and task == "node")]
    if not quiet and "pyg-identity" not in variants and task == "node":
        print("  (torch_geometric does not import here: no CompressedNeighborLoader row)", flush=True)
    rows = []
    for workers in counts:
        loaders = _dgl_loaders(g, x, y, edge_index, variants=variants, workers=workers, batch_size=batch_size,
                               num_neighbors=num_neighbors, task=task)
        rates: dict[str, list[float]] = {v: [] for v in loaders}
        cpu: dict[str, list[float]] = {v: [] for v in loaders}
        taken = dict.fromkeys(loaders, batches)
        for _ in range(rounds):
            for variant, (loader, use) in loaders.items():
                n, wall, used = time_batches(loader, batches, use, skip=2 * workers + 2)
                rates[variant].append(n / wall)
                cpu[variant].append(used / max(n, 1) * 1e3)
                taken[variant] = min(taken[variant], n)
                if not quiet:
                    print(f"  {variant}, {workers} worker(s): {n / wall:.2f} batches/s", flush=True)
        for variant, (loader, _) in loaders.items():
            stats = getattr(loader, "stats", None)
            per = max(stats.batches, 1) if stats else 1
            rows.append({"variant": variant, "task": task, "num_workers": workers, "batches": taken[variant],
                         "rounds": rounds,
                         "mb_per_batch": stats.total_sent_bytes / per / 1e6 if stats else float("nan"),
                         "raw_mb_per_batch": stats.total_raw_bytes / per / 1e6 if stats else float("nan"),
                         "batches_per_s": statistics.median(rates[variant]),
                         "best_batches_per_s": max(rates[variant]),
                         "cpu_ms_per_batch": statistics.median(cpu[variant]),
                         "copied_mb_per_batch": stats.copied_bytes_per_batch / 1e6 if stats else float("nan")})
        del loaders
    for r in rows:
        dgl_row = next(d for d in rows if d["num_workers"] == r["num_workers"] and d["variant"] == DGL_VARIANTS[0])
        r["vs_dgl"] = r["batches_per_s"] / dgl_row["batches_per_s"]
    if not quiet:
        print(f"\nDGL DataLoader vs ours, {task} batches of {batch_size}, fan-out {list(num_neighbors)}, "
              f"{num_nodes:,} nodes, "
              f"cpu, median of {rounds} round(s); CPU ms/batch: main process and workers together; "
              "MB copied/batch: host bytes our loaders copy per batch")
        print(format_table(rows, [("variant", "variant", "s"), ("num_workers", "workers", "d"),
                                  ("batches_per_s", "batches/s", ".2f"), ("best_batches_per_s", "best", ".2f"),
                                  ("vs_dgl", "vs DGL DataLoader", ".3f"),
                                  ("cpu_ms_per_batch", "CPU ms/batch", ".0f"),
                                  ("mb_per_batch", "MB sent/batch", ".2f"), ("raw_mb_per_batch", "MB raw/batch", ".2f"),
                                  ("copied_mb_per_batch", "MB copied/batch", ".2f")]))
    return rows


def first_batch_seconds(*, num_nodes: int = 20_000, codec: str = "auto", num_workers: int = 1) -> dict:
    """Seconds from CompressedNeighborLoader(...) to its first batch, in this process (a small
    graph: the time is start-up, compiling or loading the numba kernels, not work)."""
    from torch_geometric.data import Data

    from ..loaders.pyg import CompressedNeighborLoader

    x = make_family("embedding_f32", num_nodes)
    y = torch.randint(0, 172, (num_nodes,), generator=torch.Generator().manual_seed(0))
    data = Data(x=x, y=y, edge_index=power_law_graph(num_nodes, 10), num_nodes=num_nodes)
    t = time.perf_counter()
    loader = CompressedNeighborLoader(data, [10, 5], batch_size=512, shuffle=True, num_workers=num_workers,
                                      codec=codec, device="cpu")
    built = time.perf_counter()
    next(iter(loader))
    done = time.perf_counter()
    return {"construct_s": built - t, "first_batch_s": done - built, "total_s": done - t}


def run_first_batch(*, codec: str = "auto", num_workers: int = 1, cache_dir: Optional[str] = None,
                    quiet: bool = False) -> list[dict]:
    """first_batch_seconds in fresh processes: with an empty numba cache (cold: every kernel
    compiles) and again with the cache that run filled (warm: every kernel loads)."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    code = ("import json, sys; from ibp_graph.benchmarks.loader import first_batch_seconds; "
            f"print(json.dumps(first_batch_seconds(codec={codec!r}, num_workers={num_workers})))")
    rows = []
    with tempfile.TemporaryDirectory(prefix="numba-cache-") as tmp:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir or tmp}
        for cache in ("cold", "warm"):
            done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            rows.append({"cache": cache, **json.loads(done.stdout.strip().splitlines()[-1])})
            if not quiet:
                print(f"  {cache}: {rows[-1]['total_s']:.2f} s", flush=True)
    if not quiet:
        print(f"\nCompressedNeighborLoader(...) to its first batch, codec {codec}, {num_workers} worker(s), "
              "fresh processes, numba cache empty (cold) then filled (warm)")
        print(format_table(rows, [("cache", "numba cache", "s"), ("construct_s", "construct s", ".2f"),
                                  ("first_batch_s", "first batch s", ".2f"), ("total_s", "total s", ".2f")]))
    return rows


def _store_loader(data, store, *, batch_size: int, num_neighbors: Sequence[int], num_workers: int):
    from ..loaders.pyg import CompressedNeighborLoader

    d = data.clone()
    d.x = store
    torch.manual_seed(0)
    return CompressedNeighborLoader(d, list(num_neighbors), batch_size=batch_size, shuffle=True,
                                    num_workers=num_workers, persistent_workers=num_workers > 0)


def _ratio(a: float, b: float) -> float:
    """a / b; nan when b is 0 or nan (CPU seconds of a few short batches can read 0)."""
    return a / b if b > 0 else float("nan")


def _per_call_us(fn, repeat: int = 200) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t) / repeat * 1e6


def run_verify_cost(*, num_nodes: int = 200_000, avg_degree: int = 15, batch_size: int = 512,
                    num_neighbors: Sequence[int] = (10, 5), batches: int = 30, rounds: int = 5,
                    num_workers: int = 1, large_nodes: int = 400_000, quiet: bool = False) -> dict:
    """What verifying a store's chunks on first read costs: one loader over a saved store opened with
    verify="sample" (its guard's chunks all unverified at the start) against the same loader over the
    store opened with verify="none" (no guard), timed in interleaved rounds in this process.

    Gives both loaders' batches/s per round, the ratio of their medians over the rounds after the
    first (steady state) and in the first round (the chunks verified as batches need them), the
    check's per-batch cost in steady state (a flag test) and while chunks are unverified (the scan
    over the batch's rows, nothing left to hash), and the first batch's seconds of both on a larger
    store of `large_nodes` rows (identity codec, 512 B a row: every chunk verified by that batch).
    """
    import statistics
    import tempfile
    from pathlib import Path

    from torch_geometric.data import Data

    x = make_family("embedding_f32", num_nodes)
    y = torch.randint(0, 172, (num_nodes,), generator=torch.Generator().manual_seed(0))
    edge_index = power_law_graph(num_nodes, avg_degree)
    data = Data(y=y, edge_index=edge_index, num_nodes=num_nodes)
    kw = dict(batch_size=batch_size, num_neighbors=num_neighbors, num_workers=num_workers)
    with tempfile.TemporaryDirectory(prefix="ibp-verify-cost-") as tmp:
        EncodedTable.encode(x, "ibp", directory=Path(tmp) / "x", progress=False)
        guarded = EncodedTable.load(Path(tmp) / "x", verify="sample")
        chunks = guarded.guard.verified.numel()
        guarded.guard.forget()  # every chunk to verify on first read
        plain = EncodedTable.load(Path(tmp) / "x", verify="none")
        next(iter(_store_loader(data, plain, **{**kw, "num_workers": 0})))  # kernels compiled before any timing
        loaders = {"verify-on-read": _store_loader(data, guarded, **kw), "verify-none": _store_loader(data, plain, **kw)}
        rates: dict[str, list[float]] = {v: [] for v in loaders}
        cpu: dict[str, list[float]] = {v: [] for v in loaders}
        for r in range(rounds):
            for variant in list(loaders)[::1 if r % 2 == 0 else -1]:  # alternating order: neither goes first always
                n, wall, used = time_batches(loaders[variant], batches, lambda b: None,
                                             skip=0 if r == 0 else 2 * num_workers)
                rates[variant].append(n / wall)
                cpu[variant].append(used / max(n, 1) * 1e3)
                if not quiet:
                    print(f"  round {r + 1}, {variant}: {n / wall:.2f} batches/s", flush=True)
        verified = int(guarded.guard.verified.sum())
        ids = next(iter(loaders["verify-none"])).n_id
        del loaders
        steady = [a / b for a, b in zip(rates["verify-on-read"][1:], rates["verify-none"][1:])]
        check_us = _per_call_us(lambda: guarded.guard.check(guarded.compressed, ids.numpy()))
        last = guarded.compressed.row_lengths().cumsum(0) < (chunks - 1) * guarded.guard.chunk_bytes - 1
        guarded.guard.forget([chunks - 1])  # one chunk left, which no row asked for lies in: the scan, no hash
        scan_rows = ids[last[ids]].numpy()
        scan_us = _per_call_us(lambda: guarded.guard.check(guarded.compressed, scan_rows))
        large = make_family("embedding_f32", large_nodes)
        EncodedTable.encode(large, "identity", directory=Path(tmp) / "large", progress=False)
        large_data = Data(y=torch.zeros(large_nodes, dtype=torch.int64),
                          edge_index=power_law_graph(large_nodes, avg_degree), num_nodes=large_nodes)
        first, large_verified = {}, (0, 0)
        for variant, mode in (("verify-none", "none"), ("verify-on-read", "sample")):
            store = EncodedTable.load(Path(tmp) / "large", verify=mode)
            if store.guard is not None:
                store.guard.forget()
            loader = _store_loader(large_data, store, **{**kw, "num_workers": 0})
            t = time.perf_counter()
            next(iter(loader))
            first[variant] = time.perf_counter() - t
            if store.guard is not None:
                large_verified = (int(store.guard.verified.sum()), store.guard.verified.numel())
            del loader
        large_mb = (Path(tmp) / "large" / "payload.bin").stat().st_size / 1e6
    out = {"num_nodes": num_nodes, "chunks": chunks, "chunks_verified_by_batches": verified, "rounds": rounds,
           "batches": batches, "num_workers": num_workers, "batches_per_s": rates,
           "cpu_ms_per_batch": cpu, "steady_ratio": statistics.median(steady) if steady else float("nan"),
           "steady_cpu_ratio": _ratio(*(statistics.median(c[1:]) if steady else 0.0 for c in cpu.values())),
           "first_round_ratio": rates["verify-on-read"][0] / rates["verify-none"][0],
           "check_us_per_batch": check_us, "scan_us_per_batch": scan_us, "batch_rows": int(ids.numel()),
           "large_store_mb": large_mb, "large_chunks_verified": large_verified, "first_batch_s": first}
    if not quiet:
        print(f"\nverify-on-read vs verify-none, {num_nodes:,} nodes (ibp store, {chunks} chunks), batch "
              f"{batch_size}, fan-out {list(num_neighbors)}, {num_workers} worker(s), {rounds} interleaved rounds "
              f"of {batches} batches:\n  batches/s ratio {out['steady_ratio']:.3f} (median of rounds 2..), "
              f"first round {out['first_round_ratio']:.3f}; CPU ms/batch ratio {out['steady_cpu_ratio']:.3f}\n  check per batch of {ids.numel():,} rows: "
              f"{check_us:.2f} us (all verified), {scan_us:.0f} us (scan while chunks are unverified)\n  "
              f"first batch on a {large_mb:.0f} MB store: {first['verify-on-read']:.3f} s verifying "
              f"{large_verified[0]} of {large_verified[1]} chunks, "
              f"{first['verify-none']:.3f} s without")
    return out


def _write(out: Optional[str], kind: str, payload: dict) -> None:
    """JSON next to `out` (bench_out/loader.json -> bench_out/loader_<kind>.json)."""
    if out:
        stem, dot, ext = out.rpartition(".")
        path = write_json(f"{stem}_{kind}.{ext}" if dot else f"{out}_{kind}", {"benchmark": f"loader-{kind}", **payload})
        print(f"\nwrote {path}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line of `ibp-graph bench loader` and scripts/bench_loader.py."""
    p = argparse.ArgumentParser(prog="ibp-graph bench loader", description=__doc__)
    p.add_argument("--num-nodes", type=positive_int, default=200_000)
    p.add_argument("--avg-degree", type=positive_int, default=15)
    p.add_argument("--batch-size", type=positive_int, default=512)
    p.add_argument("--num-neighbors", type=fan_out, nargs="+", default=[10, 5])
    p.add_argument("--batches", type=positive_int, default=30, help="timed batches per variant")
    p.add_argument("--num-workers", type=nonnegative_int, nargs="+", default=[1],
                   help="worker counts (--dgl: each in the same run; otherwise the first)")
    p.add_argument("--device", type=device, default="cpu", help="cpu or cuda")
    p.add_argument("--out", type=out_file, default="bench_out/loader.json",
                   help="JSON output path (--verify-cost and --first-batch write beside it: NAME_verify_cost.json, "
                        "NAME_first_batch.json)")
    p.add_argument("--rounds", type=positive_int, default=1,
                   help="with --dgl: timing rounds, every loader in turn each round (median and best)")
    p.add_argument("--dgl", action="store_true",
                   help="instead: DGL's own DataLoader vs our loaders (identity; DGL's: also auto and an auto "
                        "store) (needs dgl)")
    p.add_argument("--task", choices=TASKS, default="node",
                   help="with --dgl: node batches, or link batches (as_edge_prediction_sampler, one negative "
                        "per seed edge)")
    p.add_argument("--first-batch", action="store_true",
                   help="instead: seconds from CompressedNeighborLoader(...) to its first batch, cold and "
                        "warm numba cache (fresh processes)")
    p.add_argument("--codec", default="auto", help="--first-batch: the loader's codec")
    p.add_argument("--verify-cost", action="store_true",
                   help="instead: a loader over a store verified on read vs the same store opened with "
                        "verify='none', interleaved --rounds (batches/s ratio, per-batch check cost, first "
                        "batch on a ~200 MB store)")
    a = p.parse_args(argv)
    if a.verify_cost:
        result = run_verify_cost(num_nodes=a.num_nodes, avg_degree=a.avg_degree, batch_size=a.batch_size,
                                 num_neighbors=a.num_neighbors, batches=a.batches, rounds=max(2, a.rounds),
                                 num_workers=a.num_workers[0])
        _write(a.out, "verify_cost", result)
        return 0
    if a.first_batch:
        rows = run_first_batch(codec=a.codec, num_workers=a.num_workers[0])
        _write(a.out, "first_batch", {"codec": a.codec, "num_workers": a.num_workers[0], "results": rows})
        return 0
    if a.dgl:
        rows = run_dgl(num_nodes=a.num_nodes, avg_degree=a.avg_degree, batch_size=a.batch_size,
                       num_neighbors=a.num_neighbors, batches=a.batches, num_workers=a.num_workers,
                       rounds=a.rounds, task=a.task)
        _write(a.out, "dgl" if a.task == "node" else "dgl_link",
               {"task": a.task, "num_nodes": a.num_nodes, "avg_degree": a.avg_degree, "batch_size": a.batch_size,
                "num_neighbors": a.num_neighbors, "rounds": a.rounds, "results": rows})
        return 0
    run(num_nodes=a.num_nodes, avg_degree=a.avg_degree, batch_size=a.batch_size,
        num_neighbors=a.num_neighbors, batches=a.batches, num_workers=a.num_workers[0],
        device=a.device, out=a.out)
    return 0
