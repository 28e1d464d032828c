"""Receiver-side decode benchmark: a batch of random rows gathered compressed, then decoded.

For IBP and EBP, one EncodedTable of ``rows`` x 128 float32 rows (the synthetic
``embedding_f32`` family: averaged word vectors like ogbn-papers100M) is built; per thread
count, ``batch`` random rows are gathered compressed (``EncodedTable.index_select``, new
memory each call, as a server answering a request does) and decoded (``codec.decode``, new
memory each call, and into a reused ``out=``), and the whole table is decoded contiguously
into a reused buffer as the reference. Rows received from other ranks go to scattered batch
positions: ``placed`` decodes them into new memory and then copies each to its position
(``pipeline.sources.assemble``, as a GPU does), ``out_rows`` decodes each straight into its
position of a new batch tensor (``codec.decode(out=, out_rows=)``), ``pooled`` the same into a tensor
of a ``BufferPool`` (the pages of the batch before, dropped: what the loader's CPU decode does). Every
speed is GB/s of *decoded* bytes, best of ``repeat``; ``per core`` divides by the thread count. Prints
one table, writes JSON.

    python scripts/bench_decode.py --rows 2000000 --batch 434000 --threads 1 2
"""
from __future__ import annotations

import argparse
from typing import Optional, Sequence

import numba
import numpy as np
import torch

from ..codec import EBPCodec, IBPCodec
from ..data.store import EncodedTable
from ..data.synthetic import make_family
from ..layout.buffers import BufferPool, empty_host
from ..pipeline.sources import assemble
from ..tables import report_results
from .args import out_file, positive_int
from .codec import best_time

CODECS = {"ibp": IBPCodec, "ebp": EBPCodec}
COLUMNS = [
    ("codec", "codec", "s"), ("threads", "threads", "d"), ("fraction", "fraction", ".4f"),
    ("gather_gbps", "gather GB/s", ".2f"), ("decode_gbps", "decode GB/s", ".2f"),
    ("decode_out_gbps", "decode out= GB/s", ".2f"), ("gather_decode_gbps", "gather+decode GB/s", ".2f"),
    ("decode_per_core_gbps", "decode/core", ".2f"), ("placed_gbps", "placed GB/s", ".2f"),
    ("out_rows_gbps", "out_rows GB/s", ".2f"), ("out_rows_per_core_gbps", "out_rows/core", ".2f"),
    ("pooled_gbps", "pooled GB/s", ".2f"), ("pooled_per_core_gbps", "pooled/core", ".2f"),
    ("contiguous_gbps", "contiguous GB/s", ".2f"),
    ("contiguous_per_core_gbps", "contiguous/core", ".2f"),
]
#: rows generated once and repeated to fill a larger table (generation costs ~7 s per million rows).
GENERATED_ROWS = 1_000_000


def make_table_rows(n_rows: int, seed: int = 0) -> torch.Tensor:
    """n_rows x 128 float32 rows of embedding_f32: up to GENERATED_ROWS generated, then repeated."""
    x = make_family("embedding_f32", min(n_rows, GENERATED_ROWS), seed=seed)
    if n_rows > x.shape[0]:
        x = x.repeat(-(-n_rows // x.shape[0]), 1)[:n_rows]
    return x


def bench_codec(name: str, x: torch.Tensor, batch: int, threads: Sequence[int], repeat: int,
                seed: int = 0) -> list[dict]:
    """One codec: fit on x, encode the table, then per thread count gather and decode `batch` rows."""
    codec = CODECS[name].fit(x)
    table = EncodedTable(codec, codec.encode(x))
    idx = torch.from_numpy(np.random.default_rng(seed).integers(0, x.shape[0], batch))
    gathered = table.index_select(idx)
    if not torch.equal(codec.decode(gathered), x[idx]):
        raise RuntimeError(f"{name}: decode(index_select(rows)) differs from x[rows]")
    out = torch.empty(batch, *x.shape[1:], dtype=x.dtype)
    pos = torch.from_numpy(np.random.default_rng(seed + 1).permutation(batch))  # batch positions of the rows
    scattered = lambda: codec.decode(gathered, out=empty_host(tuple(out.shape), x.dtype), out_rows=pos)  # noqa: E731
    pool = BufferPool()
    pooled = lambda: codec.decode(gathered, out=pool.empty(tuple(out.shape), x.dtype), out_rows=pos)  # noqa: E731
    for how, decoded in (("out_rows", scattered), ("pooled", pooled)):
        if not torch.equal(decoded()[pos], x[idx]):
            raise RuntimeError(f"{name}: decode(out_rows=) into {how} memory differs from the rows in their positions")
    whole = torch.empty_like(x)
    row_nbytes = x[0].numel() * x.element_size()
    gb = batch * row_nbytes / 1e9
    results = []
    for n in threads:
        numba.set_num_threads(n)
        t_gather = best_time(lambda: table.index_select(idx), repeat)
        t_decode = best_time(lambda: codec.decode(gathered), repeat)
        t_out = best_time(lambda: codec.decode(gathered, out=out), repeat)
        t_both = best_time(lambda: codec.decode(table.index_select(idx)), repeat)
        t_placed = best_time(lambda: assemble(batch, pos, codec.decode(gathered), pos[:0], out[:0]), repeat)
        t_scattered = best_time(scattered, repeat)
        t_pooled = best_time(pooled, repeat)
        t_whole = best_time(lambda: codec.decode(table.compressed, out=whole), repeat)
        whole_gb = x.shape[0] * row_nbytes / 1e9
        results.append({
            "codec": name, "threads": n, "rows": x.shape[0], "batch": batch,
            "fraction": table.fraction, "gather_gbps": gb / t_gather, "decode_gbps": gb / t_decode,
            "decode_out_gbps": gb / t_out, "gather_decode_gbps": gb / t_both,
            "decode_per_core_gbps": gb / t_decode / n, "placed_gbps": gb / t_placed,
            "out_rows_gbps": gb / t_scattered, "out_rows_per_core_gbps": gb / t_scattered / n,
            "pooled_gbps": gb / t_pooled, "pooled_per_core_gbps": gb / t_pooled / n,
            "contiguous_gbps": whole_gb / t_whole,
            "contiguous_per_core_gbps": whole_gb / t_whole / n,
        })
    return results


def run(codecs: Sequence[str] = ("ibp", "ebp"), *, rows: int = 2_000_000, batch: int = 434_000,
        threads: Optional[Sequence[int]] = None, repeat: int = 5,
        out: Optional[str] = "bench_out/decode.json", quiet: bool = False) -> list[dict]:
    """Benchmark the codecs; print the table, write JSON; return the rows."""
    for argname, v in (("rows", rows), ("batch", batch), ("repeat", repeat)):
        if not v > 0:
            raise ValueError(f"{argname}={v!r} is not accepted; it must be > 0")
    before = numba.get_num_threads()
    threads = sorted({1, numba.config.NUMBA_NUM_THREADS}) if threads is None else list(threads)
    bad = [n for n in threads if not 1 <= n <= numba.config.NUMBA_NUM_THREADS]
    if bad:
        raise ValueError(f"threads={threads!r} is not accepted: {bad} outside [1, "
                         f"{numba.config.NUMBA_NUM_THREADS}] (numba's thread count)")
    unknown = [c for c in codecs if c not in CODECS]
    if unknown:
        raise ValueError(f"codecs={list(codecs)!r} is not accepted: {unknown}; use {list(CODECS)}")
    x = make_table_rows(rows)
    try:
        results = []
        for name in codecs:
            results += bench_codec(name, x, batch, threads, repeat)
            if not quiet:
                for r in results[-len(threads):]:
                    print(f"  {name}, {r['threads']} thread(s): gather {r['gather_gbps']:.2f}, decode "
                          f"{r['decode_gbps']:.2f} GB/s", flush=True)
    finally:
        numba.set_num_threads(before)
    title = (f"Gather {batch} random rows of a {rows} x 128 float32 table (embedding_f32) and decode "
             f"them, best of {repeat} (GB/s of decoded rows)")
    report_results(results, COLUMNS, title, out,
                   {"benchmark": "decode", "rows": rows, "batch": batch, "threads": threads,
                    "repeat": repeat}, quiet=quiet)
    return results


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line of `ibp-graph bench decode` and scripts/bench_decode.py."""
    p = argparse.ArgumentParser(prog="ibp-graph bench decode", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--codecs", nargs="+", default=["ibp", "ebp"], choices=list(CODECS))
    p.add_argument("--rows", type=positive_int, default=2_000_000, help="table rows (default 2000000)")
    p.add_argument("--batch", type=positive_int, default=434_000,
                   help="rows gathered per call (default 434000: a [15,10,5] batch of 1024 seeds)")
    p.add_argument("--threads", type=positive_int, nargs="+", default=None,
                   help="numba thread counts (default: 1 and all)")
    p.add_argument("--repeat", type=positive_int, default=5, help="timed calls per measurement; the best counts")
    p.add_argument("--out", type=out_file, default="bench_out/decode.json", help="JSON output path")
    a = p.parse_args(argv)
    run(a.codecs, rows=a.rows, batch=a.batch, threads=a.threads, repeat=a.repeat, out=a.out)
    return 0
