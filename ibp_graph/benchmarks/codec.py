"""Codec benchmark: per synthetic family, the fraction and CPU encode/decode speed per core.

Every speed is also given as a ratio to a plain memory copy of the same bytes measured
in the same run, because these machines are shared and absolute times drift.
"""
from __future__ import annotations

import argparse
import time
from typing import Callable, Optional, Sequence

import numba
import numpy as np
import torch

from ..codec import EBPCodec, IBPCodec
from ..layout.dtypes import as_row_bytes
from ..layout.rows import condensed_row_bounds
from ..data.synthetic import FAMILIES, make_family
from ..tables import report_results
from .args import out_file, positive_float, positive_int

COLUMNS = [
    ("family", "family", "s"), ("shape", "row shape", "s"), ("dtype", "dtype", "s"),
    ("word_bits", "W", "d"), ("threshold", "t", ".2f"), ("fraction", "fraction", ".4f"),
    ("encode_gbps", "enc GB/s", ".2f"), ("encode_vs_memcpy", "enc/memcpy", ".3f"),
    ("decode_gbps", "dec GB/s", ".2f"), ("decode_vs_memcpy", "dec/memcpy", ".3f"),
    ("memcpy_gbps", "memcpy GB/s", ".2f"),
    ("ebp_fraction", "EBP frac", ".4f"), ("ebp_encode_gbps", "EBP enc", ".2f"),
    ("ebp_decode_gbps", "EBP dec", ".2f"),
    ("gather_gbps", "gather GB/s", ".2f"), ("gather_check_pct", "check %", ".2f"),
]


def best_time(fn: Callable[[], object], repeat: int) -> float:
    """Smallest wall time of `repeat` calls after one warm-up (least disturbed by neighbours)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def bench_family(name: str, *, mbytes: float, repeat: int, seed: int = 0) -> dict:
    """Fraction and per-core speeds of IBP and EBP on one family (about `mbytes` MB of raw rows)."""
    probe = make_family(name, 1, seed=seed)
    row_nbytes = max(1, probe[0].numel() * probe.element_size())
    n_rows = max(64, int(mbytes * 1e6 // row_nbytes))
    x = make_family(name, n_rows, seed=seed)
    codec = IBPCodec.fit(x)
    ct = codec.encode(x)
    out = torch.empty_like(x)
    codec.decode(ct, out=out)
    src = as_row_bytes(x)
    if not np.array_equal(as_row_bytes(out), src):
        raise RuntimeError(f"family {name}: decode(encode(x)) differs from x")
    raw = x.numel() * x.element_size()
    dst = np.empty_like(src)
    t_copy = best_time(lambda: np.copyto(dst, src), repeat)
    t_enc = best_time(lambda: codec.encode(x), repeat)
    t_dec = best_time(lambda: codec.decode(ct, out=out), repeat)
    ebp = EBPCodec.fit(x)
    ebp_ct = ebp.encode(x)
    ebp.decode(ebp_ct, out=out)
    if not np.array_equal(as_row_bytes(out), src):
        raise RuntimeError(f"family {name}: EBP decode(encode(x)) differs from x")
    t_ebp_enc = best_time(lambda: ebp.encode(x), repeat)
    t_ebp_dec = best_time(lambda: ebp.decode(ebp_ct, out=out), repeat)
    gather_s, check_s, gathered = bench_gather(ct, repeat, seed)
    gb = raw / 1e9
    return {
        "family": name, "shape": "x".join(map(str, x.shape[1:])), "dtype": str(x.dtype).split(".")[-1],
        "rows": n_rows, "raw_bytes": raw, "compressed_bytes": ct.nbytes,
        "word_bits": codec.word_bits, "threshold": codec.threshold, "fraction": ct.nbytes / raw,
        "encode_gbps": gb / t_enc, "decode_gbps": gb / t_dec, "memcpy_gbps": gb / t_copy,
        "encode_vs_memcpy": t_copy / t_enc, "decode_vs_memcpy": t_copy / t_dec,
        "ebp_compressed_bytes": ebp_ct.nbytes, "ebp_fraction": ebp_ct.nbytes / raw,
        "ebp_sparse": ebp.sparse, "ebp_encode_gbps": gb / t_ebp_enc,
        "ebp_decode_gbps": gb / t_ebp_dec,
        "gather_gbps": gathered / 1e9 / gather_s, "gather_check_pct": 100.0 * check_s / gather_s,
    }


def bench_gather(ct, repeat: int, seed: int = 0) -> tuple[float, float, int]:
    """(seconds of ct.index_select of a random quarter of the rows, seconds its bounds checks
    add, compressed bytes gathered): what the store's gather costs, and what refusing rows
    outside the payload adds to it (the checked bounds pass, less the same bounds computed
    by numpy without checks; negative when the one checked pass is the faster)."""
    idx = np.random.default_rng(seed).integers(0, ct.n_rows, max(1, ct.n_rows // 4))
    rows = torch.from_numpy(idx)
    t_gather = best_time(lambda: ct.index_select(rows), repeat)
    payload, offsets = ct.payload.numpy(), ct.offsets.numpy()

    def unchecked():
        starts = offsets[idx].astype(np.int64)
        return starts, offsets[idx + 1].astype(np.int64) - starts

    t_checked = best_time(lambda: condensed_row_bounds(payload, offsets, idx), repeat)
    t_unchecked = best_time(unchecked, repeat)
    _, lengths = condensed_row_bounds(payload, offsets, idx)
    return t_gather, t_checked - t_unchecked, int(lengths.sum())


def run(families: Sequence[str] = FAMILIES, *, mbytes: float = 64.0, repeat: int = 5,
        threads: int = 1, out: Optional[str] = "bench_out/codec.json", quiet: bool = False) -> list[dict]:
    """Benchmark the families; print the table, write JSON; return the rows."""
    before = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        rows = []
        for name in families:
            rows.append(bench_family(name, mbytes=mbytes, repeat=repeat))
            if not quiet:
                print(f"  {name}: fraction IBP {rows[-1]['fraction']:.4f}, "
                      f"EBP {rows[-1]['ebp_fraction']:.4f}", flush=True)
    finally:
        numba.set_num_threads(before)
    title = (f"IBP and EBP codecs on the CPU, {threads} thread(s), ~{mbytes:g} MB per family, best of {repeat} "
             "(GB/s of raw rows)")
    report_results(rows, COLUMNS, title, out,
                   {"benchmark": "codec", "threads": threads, "mbytes": mbytes, "repeat": repeat}, quiet=quiet)
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line of `ibp-graph bench codec` and scripts/bench_codec.py."""
    p = argparse.ArgumentParser(prog="ibp-graph bench codec", description=__doc__)
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES),
                   metavar="NAME", help=f"families to run (default: all of {', '.join(FAMILIES)})")
    p.add_argument("--mbytes", type=positive_float, default=64.0, help="raw MB per family (default 64)")
    p.add_argument("--repeat", type=positive_int, default=5, help="timed runs per measurement; the best counts")
    p.add_argument("--threads", type=positive_int, default=1, help="numba threads (default 1: per-core speed)")
    p.add_argument("--out", type=out_file, default="bench_out/codec.json", help="JSON output path")
    a = p.parse_args(argv)
    run(a.families, mbytes=a.mbytes, repeat=a.repeat, threads=a.threads, out=a.out)
    return 0
