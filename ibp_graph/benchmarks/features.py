"""Feature-mode benchmark: one loader epoch per way of feeding node features, on one large graph.

Variants (all CompressedNeighborLoader, the same graph, seeds, fan-out and workers):

- ``identity-worker``: raw features gathered in the workers, codec identity (no compression);
- ``auto-worker``: a pre-encoded store (codec auto), compressed rows gathered in the workers;
- ``auto-zero-copy``: the same store, pinned; the main process fetches the rows (fused
  gather + decode on the GPU; on the CPU, the stand-in: gather + decode in the main process);
- ``auto-zero-copy+cache``: the same, with the hottest rows in a compressed device cache;
- ``resident`` (CUDA only): features already in GPU memory, gathered there (the ceiling).

Before it is timed, every variant's first batch is compared bit for bit with the CPU path
(the raw rows of ``n_id`` gathered on the CPU). The graph is ``benchmarks.graphs.papers_like``
(power-law, built in seconds at 10M nodes). Prints one table and writes JSON.
"""
from __future__ import annotations

import argparse
import time
from typing import Optional, Sequence, Union

import torch

from ..tables import format_table, write_json
from .graphs import papers_like, tiled_store
from .args import device, fan_out, nonnegative_int, out_file, positive_float, positive_int

VARIANTS = ("identity-worker", "auto-worker", "auto-zero-copy", "auto-zero-copy+cache")
GPU_VARIANTS = VARIANTS + ("resident",)
COLUMNS = [
    ("variant", "variant", "s"), ("batches", "batches", "d"), ("batches_per_s", "batches/s", ".2f"),
    ("vs_identity", "vs identity-worker", ".3f"), ("vs_resident", "vs resident", ".3f"),
    ("sent_mb", "MB sent/batch", ".2f"), ("zero_copy_mb", "MB zero-copy/batch", ".2f"),
    ("cache_mb", "MB cache/batch", ".2f"), ("hit_rate", "hit rate", ".3f"), ("exact", "exact", "s"),
]


def same_rows(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Bit-for-bit equality of two row tensors (any device)."""
    a, b = got.detach().cpu().contiguous(), want.contiguous()
    return a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def make_loader(variant: str, graph, x, y, store, *, seeds, num_neighbors, batch_size, num_workers, device,
                device_cache):
    """The loader of one variant (see the module's docstring)."""
    from ..loaders.pyg import CompressedNeighborLoader

    attrs = {"identity-worker": {"x": x, "y": y}, "resident": {"y": y}}.get(variant, {"x": store, "y": y})
    kw = dict(codec="identity" if variant in ("identity-worker", "resident") else "auto",
              features="worker" if variant in ("identity-worker", "auto-worker", "resident") else "zero_copy",
              device_cache=device_cache if variant.endswith("+cache") else 0)
    return CompressedNeighborLoader((attrs, graph), list(num_neighbors), input_nodes=seeds,
                                    batch_size=batch_size, shuffle=True, num_workers=num_workers,
                                    persistent_workers=num_workers > 0, device=device, **kw)


def run_variant(variant: str, loader, x: torch.Tensor, x_dev: Optional[torch.Tensor], device: str) -> dict:
    """Check the first batch bit for bit against the CPU path, then time one whole epoch."""
    def rows(batch):
        return x_dev.index_select(0, batch.n_id) if variant == "resident" else batch.x

    it = iter(loader)
    first = next(it)
    exact = same_rows(rows(first), x[first.n_id.cpu()])
    del it, first
    loader.stats.reset()
    t = time.perf_counter()
    n = 0
    for batch in loader:
        rows(batch)
        n += 1
    if device != "cpu":
        torch.cuda.synchronize()
    wall = time.perf_counter() - t
    s = loader.stats
    per = max(s.batches, 1)
    out = {"variant": variant, "batches": n, "seconds": wall, "batches_per_s": n / wall if wall else 0.0,
           "sent_mb": s.total_sent_bytes / per / 1e6, "zero_copy_mb": s.tier_bytes["zero_copy"] / per / 1e6,
           "cache_mb": s.tier_bytes["device_cache"] / per / 1e6,
           "hit_rate": s.hit_rate if s.cache else None, "exact": "yes" if exact else "NO",
           "cache": dict(s.cache), "stats": s.as_dict()}
    if loader.features.serving is not None:
        loader.features.serving.release()
    return out


def run(*, num_nodes: int = 10_000_000, avg_degree: float = 15, family: str = "embedding_f32",
        base_rows: int = 65_536, epoch_seeds: int = 65_536, batch_size: int = 1024,
        num_neighbors: Sequence[int] = (15, 10, 5), num_workers: int = 8, device: str = "cpu",
        device_cache: Union[int, float] = 0.05, variants: Optional[Sequence[str]] = None, seed: int = 0,
        out: Optional[str] = "bench_out/features.json", quiet: bool = False) -> dict:
    """Build the graph, run each variant's epoch; print the table, write JSON; return the report."""
    allowed = GPU_VARIANTS if device != "cpu" else VARIANTS
    variants = tuple(variants or allowed)
    bad = [v for v in variants if v not in allowed]
    if bad:
        raise ValueError(f"variants={bad} are not accepted on device {device!r}; accepted: {allowed}")
    t0 = time.perf_counter()
    graph, x, y = papers_like(num_nodes, avg_degree, family=family, base_rows=base_rows, seed=seed)
    gen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    store = tiled_store(x[:min(base_rows, x.shape[0])], x.shape[0], "auto")
    store_s = time.perf_counter() - t0
    gen = torch.Generator().manual_seed(seed + 1)
    seeds = torch.randperm(graph.num_nodes, generator=gen)[:epoch_seeds]
    if not quiet:
        print(f"graph: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges in {gen_s:.1f} s; x {tuple(x.shape)} "
              f"{family}; store {store.codec.name} fraction {store.fraction:.4f} in {store_s:.1f} s; epoch "
              f"{len(seeds):,} seeds, batch {batch_size}, fan-out {list(num_neighbors)}, {num_workers} workers, "
              f"device {device}", flush=True)
    x_dev = x.to(device) if device != "cpu" and "resident" in variants else None
    rows = []
    report = {"benchmark": "features", "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
              "avg_degree": avg_degree, "family": family, "store_codec": store.codec.name,
              "store_fraction": store.fraction, "epoch_seeds": len(seeds), "batch_size": batch_size,
              "num_neighbors": list(num_neighbors), "num_workers": num_workers, "device": device,
              "device_cache": device_cache, "gen_s": gen_s, "store_s": store_s, "results": rows}
    for variant in variants:
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        loader = make_loader(variant, graph, x, y, store, seeds=seeds, num_neighbors=num_neighbors,
                             batch_size=batch_size, num_workers=num_workers, device=device,
                             device_cache=device_cache)
        start_s = time.perf_counter() - t0
        r = run_variant(variant, loader, x, x_dev, device)
        r["start_s"] = start_s
        rows.append(r)
        del loader
        ratios(rows)
        if out:  # after every variant: a run cut short keeps what it measured
            write_json(out, report)
        if not quiet:
            print(f"  {variant}: {r['batches_per_s']:.2f} batches/s, exact={r['exact']}", flush=True)
    report["table"] = table = format_table(rows, COLUMNS)
    if not quiet:
        print(f"\none epoch per variant; MB sent: worker -> main per batch; zero-copy / cache: compressed "
              f"bytes read per batch\n{table}")
    if out:
        path = write_json(out, report)
        if not quiet:
            print(f"\nwrote {path}")
    return report


def ratios(rows: list[dict]) -> None:
    """Each row's batches/s against identity-worker's and resident's (None while either is missing)."""
    by = {r["variant"]: r["batches_per_s"] for r in rows}
    for r in rows:
        base, ceiling = by.get("identity-worker"), by.get("resident")
        r["vs_identity"] = r["batches_per_s"] / base if base else None
        r["vs_resident"] = r["batches_per_s"] / ceiling if ceiling else None


def _cache_arg(text: str) -> Union[int, float]:
    return float(text) if any(c in text for c in ".eE") else int(text)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line of scripts/bench_features.py."""
    p = argparse.ArgumentParser(prog="bench_features", description=__doc__.split("\n")[0])
    p.add_argument("--num-nodes", type=positive_int, default=10_000_000)
    p.add_argument("--avg-degree", type=positive_float, default=15)
    p.add_argument("--family", default="embedding_f32")
    p.add_argument("--base-rows", type=positive_int, default=65_536, help="feature rows generated, then tiled")
    p.add_argument("--epoch-seeds", type=positive_int, default=65_536, help="seed nodes of the timed epoch")
    p.add_argument("--batch-size", type=positive_int, default=1024)
    p.add_argument("--num-neighbors", type=fan_out, nargs="+", default=[15, 10, 5])
    p.add_argument("--num-workers", type=nonnegative_int, default=8)
    p.add_argument("--device", type=device, default="cpu", help="cpu (the stand-in) or cuda")
    p.add_argument("--device-cache", type=_cache_arg, default=0.05,
                   help="cache budget of the +cache variant: bytes (int) or a fraction of device memory")
    p.add_argument("--variants", nargs="+", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=out_file, default="bench_out/features.json", help="JSON output path")
    a = p.parse_args(argv)
    report = run(num_nodes=a.num_nodes, avg_degree=a.avg_degree, family=a.family, base_rows=a.base_rows,
                 epoch_seeds=a.epoch_seeds, batch_size=a.batch_size, num_neighbors=a.num_neighbors,
                 num_workers=a.num_workers, device=a.device, device_cache=a.device_cache,
                 variants=a.variants, seed=a.seed, out=a.out)
    return 0 if all(r["exact"] == "yes" for r in report["results"]) else 1
