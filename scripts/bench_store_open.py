"""How long opening a papers100M-like feature store takes with each verification mode; extrapolated to 111 M rows.

Builds (once, under --dir) stores of generated papers100M-like features (128-d float32
averaged word vectors, ``ibp_graph.data.graphgen``: a block of --base-rows rows tiled to
each size, encoded with --codec), then times ``EncodedTable.load(d, verify=...)`` for
"sample" (the default), "full" and "none", warm (files in the page cache) and cold
(the store's pages dropped with posix_fadvise before each open). Opening costs a
constant (meta, codec state, a few payload chunks) plus a part linear in the rows
(offsets.npy is read whole: structure check and checksum), so a least-squares line
through the sizes gives the papers100M figure, its linear part scaled by the offsets'
width (papers100M's payload passes 2 GiB, so its offsets are int64; smaller stores'
are int32). Prints a table, writes JSON.

    python scripts/bench_store_open.py --rows 1000000 2000000 4000000
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ibp_graph.benchmarks.args import out_file, positive_int
from ibp_graph.tables import format_table, machine
from ibp_graph.data.graphgen import embedding_rows
from ibp_graph.data.store import EncodedTable
from ibp_graph.data.synthetic import PAPERS100M_NUM_NODES

MODES = ("sample", "full", "none")


def build(directory: Path, rows: int, base: Optional[np.ndarray], codec: str) -> Path:
    """The store of `rows` rows (the base block tiled), encoded once and kept."""
    d = directory / f"store-{rows}-{codec}"
    if (d / "checksums.json").is_file():
        return d
    x_path = directory / f"x-{rows}.npy"
    x = np.lib.format.open_memmap(x_path, mode="w+", dtype=np.float32, shape=(rows, base.shape[1]))
    for lo in range(0, rows, base.shape[0]):
        hi = min(rows, lo + base.shape[0])
        x[lo:hi] = base[: hi - lo]
    x.flush()
    t = time.perf_counter()
    EncodedTable.encode(torch.from_numpy(np.asarray(x)), codec, directory=d, progress=False)
    print(f"  encoded {rows:,} rows in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    del x
    x_path.unlink()
    return d


def _base_rows(n: int) -> np.ndarray:
    """`n` rows of papers100M-like features (graphgen's embedding family, 172 classes)."""
    base = np.empty((n, 128), dtype=np.float32)
    t = time.perf_counter()
    embedding_rows(base, 0, np.random.default_rng(0).integers(0, 172, n), seed=0, topic_fraction=0.2,
                   num_classes=172)
    print(f"generated {n:,} base rows in {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    return base


def drop_cache(directory: Path) -> None:
    """Ask the kernel to forget the folder's clean pages (no root needed)."""
    for p in directory.iterdir():
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def time_open(d: Path, mode: str, cold: bool, repeat: int) -> float:
    """Fastest of `repeat` EncodedTable.load(d, verify=mode) plus one decoded row (the map really works).

    The minimum, not the median: on a shared machine the other loads only ever add time.
    """
    times = []
    for _ in range(repeat):
        if cold:
            drop_cache(d)
        t = time.perf_counter()
        table = EncodedTable.load(d, verify=mode)
        table.decode_rows(torch.tensor([table.n_rows - 1]))
        times.append(time.perf_counter() - t)
        del table
    return min(times)


def fit(sizes: list[int], seconds: list[float]) -> tuple[float, float]:
    """Least-squares (constant, seconds per row) through the measurements."""
    if len(sizes) == 1:
        return 0.0, seconds[0] / sizes[0]
    slope, const = np.polyfit(np.array(sizes, dtype=np.float64), np.array(seconds), 1)
    return float(const), float(max(slope, 0.0))


def main(argv=None) -> int:
    """Build the stores, time the opens, print the table and write JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=positive_int, nargs="+", default=[1_000_000, 2_000_000, 4_000_000])
    p.add_argument("--base-rows", type=positive_int, default=1 << 20, help="rows generated (then tiled)")
    p.add_argument("--codec", default="auto")
    p.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "ibp_graph_bench_store_open"),
                   help="where the stores are kept (several GB; --clean removes them)")
    p.add_argument("--repeat", type=positive_int, default=7)
    p.add_argument("--json", type=out_file, default="runs/bench_store_open.json")
    p.add_argument("--clean", action="store_true", help="remove the stores afterwards")
    a = p.parse_args(argv)
    directory = Path(a.dir)
    directory.mkdir(parents=True, exist_ok=True)
    base = None
    rows_out = []
    for rows in sorted(a.rows):
        if base is None and not (directory / f"store-{rows}-{a.codec}" / "checksums.json").is_file():
            base = _base_rows(min(a.base_rows, max(a.rows)))
        d = build(directory, rows, base, a.codec)
        size = sum(f.stat().st_size for f in d.iterdir())
        codec = json.loads((d / "meta.json").read_text())["codec"]
        offset_bytes = np.load(d / "offsets.npy", mmap_mode="r").itemsize if (d / "offsets.npy").exists() else 8
        for mode in MODES:
            for cold in (False, True):
                rows_out.append({"rows": rows, "codec": codec, "store_mb": size / 1e6, "verify": mode,
                                 "offset_bytes": offset_bytes,
                                 "cache": "cold" if cold else "warm", "seconds": time_open(d, mode, cold, a.repeat)})
    extrapolated = []
    for mode in MODES:
        for cache in ("warm", "cold"):
            sel = [r for r in rows_out if r["verify"] == mode and r["cache"] == cache]
            const, per_row = fit([r["rows"] for r in sel], [r["seconds"] for r in sel])
            # papers100M's payload passes 2 GiB: its offsets are int64; the linear part scales with their bytes
            per_row *= 8 / sel[-1]["offset_bytes"]
            extrapolated.append({"rows": PAPERS100M_NUM_NODES, "codec": sel[0]["codec"], "store_mb": None,
                                 "verify": mode, "cache": cache, "seconds": const + per_row * PAPERS100M_NUM_NODES,
                                 "seconds_per_million_rows": per_row * 1e6, "constant_seconds": const})
    columns = [("rows", "rows", ",d"), ("codec", "codec", "s"), ("store_mb", "store MB", ",.0f"),
               ("verify", "verify", "s"), ("cache", "cache", "s"), ("seconds", "open s", ".3f")]
    print(format_table(rows_out, columns))
    print("\nextrapolated to ogbn-papers100M (least-squares line through the sizes above)")
    print(format_table(extrapolated, columns + [("seconds_per_million_rows", "s per M rows", ".4f"),
                                                ("constant_seconds", "constant s", ".4f")]))
    out = Path(a.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"measured": rows_out, "extrapolated": extrapolated, "machine": machine()},
                              indent=2) + "\n")
    print(f"\nwrote {out}")
    if a.clean:
        shutil.rmtree(directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
