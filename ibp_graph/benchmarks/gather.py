"""Raw row gather benchmark: ``pipeline.grouping.gather_rows`` against ``torch.index_select``.

A worker's feature gather is a random row gather from a table larger than every cache, bound
by memory latency, not bandwidth. For each row size, one table of ``table_gb`` GB is gathered
at ``rows`` random row indices into a preallocated output (as a worker writes into its
shared-memory slot), by torch's ``index_select(out=)`` and by ``gather_rows`` (the
prefetching numba kernel of ``layout.rows.gather_fixed_rows``), with ``threads`` threads
(default 1: per-core speed), best of ``repeat``. ``memcpy`` copies the same number of bytes
contiguously in the same run (the ceiling). Both results are compared bit for bit. Prints one
table, writes JSON.

    python scripts/bench_gather.py --table-gb 2 --row-bytes 8 36 128 512 2048 3072
"""
from __future__ import annotations

import argparse
from typing import Optional, Sequence

import numba
import torch

from ..pipeline.grouping import gather_rows
from ..tables import report_results
from .args import out_file, positive_float, positive_int
from .codec import best_time

COLUMNS = [
    ("row_bytes", "row bytes", "d"), ("rows", "rows", "d"), ("index_select_gbps", "index_select GB/s", ".2f"),
    ("gather_rows_gbps", "gather_rows GB/s", ".2f"), ("ratio", "gather_rows/index_select", ".2f"),
    ("memcpy_gbps", "memcpy GB/s", ".2f"), ("exact", "exact", "s"),
]


def bench_row_size(table: torch.Tensor, row_bytes: int, rows: int, repeat: int, seed: int = 0) -> dict:
    """One row size: `table` (a flat uint8 buffer) viewed as rows of `row_bytes`, gathered at
    `rows` random indices both ways."""
    n = table.numel() // row_bytes
    t = table[: n * row_bytes].view(n, row_bytes)
    rows = min(rows, n)
    index = torch.randint(0, n, (rows,), generator=torch.Generator().manual_seed(seed))
    out_a = torch.empty(rows, row_bytes, dtype=torch.uint8)
    out_b = torch.empty_like(out_a)
    src = t[:rows]
    t_select = best_time(lambda: torch.index_select(t, 0, index, out=out_a), repeat)
    t_ours = best_time(lambda: gather_rows(t, index, out=out_b), repeat)
    exact = torch.equal(out_a, out_b) and torch.equal(out_b, t[index])
    t_copy = best_time(lambda: out_b.copy_(src), repeat)
    nbytes = rows * row_bytes
    return {"row_bytes": row_bytes, "rows": rows, "index_select_gbps": nbytes / 1e9 / t_select,
            "gather_rows_gbps": nbytes / 1e9 / t_ours, "ratio": t_select / t_ours,
            "memcpy_gbps": nbytes / 1e9 / t_copy, "exact": "yes" if exact else "NO"}


def run(row_bytes: Sequence[int] = (8, 36, 128, 512, 2048, 3072), *, table_gb: float = 2.0,
        rows: int = 434_000, repeat: int = 7, threads: int = 1,
        out: Optional[str] = "bench_out/gather.json", quiet: bool = False) -> list[dict]:
    """Benchmark the row sizes; print the table, write JSON; return the rows."""
    for name, v in (("table_gb", table_gb), ("rows", rows), ("repeat", repeat), ("threads", threads)):
        if not v > 0:
            raise ValueError(f"{name}={v!r} is not accepted; it must be > 0")
    bad = [b for b in row_bytes if b < 1]
    if bad:
        raise ValueError(f"row_bytes={list(row_bytes)!r} is not accepted: {bad} < 1 byte")
    nbytes = int(table_gb * 1e9) // 8 * 8
    if nbytes < max(row_bytes):
        raise ValueError(f"table_gb={table_gb!r} holds no row of {max(row_bytes)} bytes")
    # distinct bytes everywhere (the exactness check sees a misplaced row), built in one pass
    table = torch.arange(nbytes // 8, dtype=torch.int64).mul_(0x9E3779B97F4A7C15 & 0x7FFFFFFFFFFFFFFF).view(torch.uint8)
    before = numba.get_num_threads(), torch.get_num_threads()
    numba.set_num_threads(threads)
    torch.set_num_threads(threads)
    try:
        results = []
        for b in row_bytes:
            results.append(bench_row_size(table, b, rows, repeat))
            if not quiet:
                r = results[-1]
                print(f"  {b} B rows: index_select {r['index_select_gbps']:.2f} GB/s, "
                      f"gather_rows {r['gather_rows_gbps']:.2f} GB/s", flush=True)
    finally:
        numba.set_num_threads(before[0])
        torch.set_num_threads(before[1])
    title = (f"Random row gather from a {nbytes / 1e9:.2f} GB table, {threads} thread(s), best of {repeat} "
             "(GB/s of gathered rows)")
    report_results(results, COLUMNS, title, out,
                   {"benchmark": "gather", "table_gb": nbytes / 1e9, "rows": rows, "threads": threads,
                    "repeat": repeat}, quiet=quiet)
    return results


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line of `ibp-graph bench gather` and scripts/bench_gather.py."""
    p = argparse.ArgumentParser(prog="ibp-graph bench gather", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--row-bytes", type=positive_int, nargs="+", default=[8, 36, 128, 512, 2048, 3072],
                   help="row sizes in bytes (default: 8 36 128 512 2048 3072)")
    p.add_argument("--table-gb", type=positive_float, default=2.0,
                   help="table size in GB, larger than the caches (default 2)")
    p.add_argument("--rows", type=positive_int, default=434_000,
                   help="rows gathered per call (default 434000: a [15,10,5] batch of 1024 seeds)")
    p.add_argument("--repeat", type=positive_int, default=7, help="timed calls per measurement; the best counts")
    p.add_argument("--threads", type=positive_int, default=1, help="numba and torch threads (default 1: per core)")
    p.add_argument("--out", type=out_file, default="bench_out/gather.json", help="JSON output path")
    a = p.parse_args(argv)
    run(a.row_bytes, table_gb=a.table_gb, rows=a.rows, repeat=a.repeat, threads=a.threads, out=a.out)
    return 0
