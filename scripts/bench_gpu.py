#!/usr/bin/env python3
"""GPU benchmark: IBP decoders against the plain transfer baselines, per synthetic family.

For each family of ``ibp_graph.data.synthetic`` it builds a table of >= 2M rows (generated
rows tiled, capped at --max-table-bytes for wide rows), fits and encodes it, then measures
with CUDA events (warm-up, median of --reps):

  decode_seq        whole compressed table in device memory -> decoded rows (in order)
  decode_rand_dev   --index-rows random rows gathered + decoded from device memory
  copy_decode       pinned compressed table -> H2D copy -> decode (effective, whole table)
  fetch_zc          random rows gathered + decoded straight from pinned host memory
                    (offsets in host memory: "host offs"; in device memory: "dev offs")
and, in the same run, the baselines:
  h2d_raw           pinned H2D copy of the raw table
  zc_gather_raw     zero-copy gather of the same random raw rows (ibp_graph.cuda.gather_rows)
  dev_gather_raw    torch.index_select of the same rows from device memory
  cpu_gather_h2d    torch.index_select on the CPU into pinned memory, then H2D copy

Every rate is decoded (raw) bytes delivered per second, GB = 1e9 bytes. Each decoder's
output is checked bit for bit against the raw rows once before timing. Prints one table
and writes JSON (--out). ``--dry-run`` builds and checks the tables on the CPU only.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import platform
import statistics
import sys
import time

import torch

GB = 1e9


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--families", default=None,
                   help="comma-separated subset of ibp_graph.data.synthetic.FAMILIES")
    p.add_argument("--table-rows", type=int, default=2_000_000, help="rows per table (tiled)")
    p.add_argument("--max-table-bytes", type=float, default=3 * 2**30,
                   help="cap on a raw table's bytes (wide rows get fewer rows)")
    p.add_argument("--base-rows", type=int, default=65536, help="rows generated before tiling")
    p.add_argument("--index-rows", type=int, default=200_000, help="rows per random gather")
    p.add_argument("--reps", type=int, default=7, help="timed repetitions (median reported)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("--dry-run", action="store_true",
                   help="build and check the tables on the CPU, time nothing (no GPU needed)")
    return p.parse_args(argv)


# --------------------------------------------------------------------------- tables
def tile_rows(x: torch.Tensor, k: int, pin: bool) -> torch.Tensor:
    """x repeated k times along rows, written straight into (pinned) host memory."""
    out = torch.empty((x.shape[0] * k,) + tuple(x.shape[1:]), dtype=x.dtype, pin_memory=pin)
    n = x.shape[0]
    for i in range(k):
        out[i * n:(i + 1) * n] = x
    return out


def tile_compressed(ct, k: int, pin: bool):
    """A CompressedTensor of ct's rows repeated k times (payload copied, offsets shifted)."""
    from ibp_graph.codec import CompressedTensor

    o = ct.offsets.to(torch.int64)
    used = int(o[-1])
    total = used * k
    payload = torch.zeros((total + 8 + 7) // 8 * 8, dtype=torch.uint8, pin_memory=pin)
    for i in range(k):
        payload[i * used:(i + 1) * used] = ct.payload[:used]
    n = ct.n_rows
    offsets = torch.empty(n * k + 1, dtype=torch.int64)
    offsets[:-1] = (o[:-1].unsqueeze(0) + used * torch.arange(k).unsqueeze(1)).reshape(-1)
    offsets[-1] = total
    offsets = offsets.to(torch.int32 if total < 2**31 else torch.int64)
    if pin:
        offsets = offsets.pin_memory()
    return CompressedTensor(payload=payload, offsets=offsets, shape=(n * k,) + tuple(ct.row_shape),
                            dtype=ct.dtype, codec=ct.codec, fingerprint=ct.fingerprint)


def build_family(name: str, args, pin: bool):
    """(codec, raw table, compressed table, base rows) for one family."""
    from ibp_graph.codec import IBPCodec
    from ibp_graph.data.synthetic import make_family

    probe = make_family(name, 8, seed=args.seed)
    row_nbytes = probe[0].numel() * probe.element_size()
    base = max(1024, min(args.base_rows, int(2**29 // row_nbytes)))
    x = make_family(name, base, seed=args.seed)
    codec = IBPCodec.fit(x)
    ct = codec.encode(x)
    want_rows = max(base, min(args.table_rows, int(args.max_table_bytes // row_nbytes)))
    k = max(1, math.ceil(want_rows / base))
    raw = tile_rows(x, k, pin)
    table = tile_compressed(ct, k, pin)
    return codec, raw, table, x


def check_tiling(codec, raw, table, x, n_check: int = 4096) -> None:
    """CPU check that the tiled compressed table decodes to the tiled raw rows (a sample)."""
    idx = torch.randint(0, raw.shape[0], (min(n_check, raw.shape[0]),))
    if not same_bits(codec.decode(table.index_select(idx)), raw[idx]):
        raise AssertionError("tiled compressed table does not decode to the tiled raw table")


# --------------------------------------------------------------------------- timing
def timed(fn, reps: int, warmup: int) -> float:
    """Median seconds of fn() on the current stream, by CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def bench_family(name: str, args) -> dict:
    from ibp_graph.cuda.decode import decode_ibp, fetch_ibp, gather_rows

    t0 = time.perf_counter()
    codec, raw, table, _ = build_family(name, args, pin=True)
    dev = torch.device("cuda")
    n, rb = raw.shape[0], codec.row_nbytes
    raw_bytes = n * rb
    setup_s = time.perf_counter() - t0

    table_dev = table.to(dev)
    raw_dev = raw.to(dev)
    table_dev_offs = dataclasses.replace(table, offsets=table.offsets.to(dev))
    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    index_cpu = torch.randint(0, n, (args.index_rows,), generator=gen)
    index = index_cpu.to(dev)
    m = args.index_rows
    out_all = torch.empty_like(raw_dev)
    out_idx = torch.empty((m,) + tuple(raw.shape[1:]), dtype=raw.dtype, device=dev)
    out_raw = torch.empty_like(out_idx)
    pinned_rows = torch.empty_like(out_idx, device="cpu").pin_memory()

    # correctness first (bit exact, once, with error checks on)
    checks = {
        "decode_seq": same_bits(decode_ibp(codec, table_dev, out=out_all), raw_dev),
        "decode_rand_dev": same_bits(fetch_ibp(codec, table_dev, index, out=out_idx),
                                     raw_dev[index]),
        "fetch_zc": same_bits(fetch_ibp(codec, table, index, out=out_idx), raw_dev[index]),
        "fetch_zc_dev_offs": same_bits(fetch_ibp(codec, table_dev_offs, index, out=out_idx),
                                       raw_dev[index]),
        "zc_gather_raw": same_bits(gather_rows(raw, index, out=out_raw), raw_dev[index]),
    }
    lengths = table.offsets[1:].to(torch.int64) - table.offsets[:-1].to(torch.int64)
    sel_bytes = int(lengths[index_cpu].sum())

    R, Wm = args.reps, args.warmup
    t = {
        "decode_seq": timed(lambda: decode_ibp(codec, table_dev, out=out_all, check=False), R, Wm),
        "decode_rand_dev": timed(lambda: fetch_ibp(codec, table_dev, index, out=out_idx,
                                                   check=False), R, Wm),
        "copy_decode": timed(lambda: decode_ibp(codec, table.to(dev, non_blocking=True),
                                                out=out_all, check=False), R, Wm),
        "fetch_zc": timed(lambda: fetch_ibp(codec, table, index, out=out_idx, check=False), R, Wm),
        "fetch_zc_dev_offs": timed(lambda: fetch_ibp(codec, table_dev_offs, index, out=out_idx,
                                                     check=False), R, Wm),
        "h2d_raw": timed(lambda: raw.to(dev, non_blocking=True), R, Wm),
        "h2d_compressed": timed(lambda: table.to(dev, non_blocking=True), R, Wm),
        "zc_gather_raw": timed(lambda: gather_rows(raw, index, out=out_raw, check=False), R, Wm),
        "dev_gather_raw": timed(lambda: torch.index_select(raw_dev, 0, index, out=out_raw), R, Wm),
        "cpu_gather_h2d": timed(lambda: out_raw.copy_(
            torch.index_select(raw, 0, index_cpu, out=pinned_rows), non_blocking=True), R, Wm),
    }
    whole = {"decode_seq", "copy_decode", "h2d_raw"}
    rate = {k: (raw_bytes if k in whole else m * rb) / v / GB for k, v in t.items()}
    rate["h2d_compressed"] = table.nbytes / t["h2d_compressed"] / GB  # bytes actually moved
    result = {
        "family": name, "dtype": str(raw.dtype).replace("torch.", ""),
        "row_shape": list(raw.shape[1:]), "row_nbytes": rb, "table_rows": n,
        "word_bits": codec.word_bits, "threshold": getattr(codec, "threshold", None),
        "fraction": table.nbytes / raw_bytes,
        "fraction_selected": (sel_bytes + 4 * m) / (m * rb),
        "raw_rows_fraction": float((lengths == rb).double().mean()),
        "index_rows": m, "seconds": t, "GBps": rate, "bit_exact": checks,
        "setup_s": setup_s,
        # PCIe floor of the fused fetch: the selected rows' compressed bytes at H2D speed
        "fetch_floor_GBps": rate["h2d_raw"] * (m * rb) / max(1, sel_bytes + 4 * m),
    }
    return result  # the tables die with this frame; main() empties the CUDA cache


# --------------------------------------------------------------------------- report
#: (header, what, width, format): what is a GBps key, or a callable of the result.
COLUMNS = [
    ("family", lambda r: r["family"], 13, "{:<13}"),
    ("rows", lambda r: r["table_rows"], 9, "{:>9}"),
    ("frac", lambda r: r["fraction"], 5, "{:>5.3f}"),
    ("dec seq", "decode_seq", 8, "{:>8.0f}"),
    ("dec rand", "decode_rand_dev", 8, "{:>8.0f}"),
    ("copy+dec", "copy_decode", 8, "{:>8.1f}"),
    ("H2D raw", "h2d_raw", 7, "{:>7.1f}"),
    ("zc fetch", "fetch_zc", 8, "{:>8.1f}"),
    ("zc f dOf", "fetch_zc_dev_offs", 8, "{:>8.1f}"),
    ("floor", lambda r: r["fetch_floor_GBps"], 6, "{:>6.1f}"),
    ("zc raw", "zc_gather_raw", 7, "{:>7.1f}"),
    ("dev raw", "dev_gather_raw", 7, "{:>7.0f}"),
    ("cpu+H2D", "cpu_gather_h2d", 7, "{:>7.1f}"),
    ("exact", lambda r: "yes" if all(r["bit_exact"].values()) else "NO", 5, "{:>5}"),
]


def format_table(results: list[dict]) -> str:
    """One line per family, GB/s of decoded rows."""
    head = " ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, _, w, _) in enumerate(COLUMNS))
    lines = ["GB/s of decoded rows (1e9 B/s). frac: compressed/raw bytes. dec seq/rand: decode "
             "from device memory (whole table / random rows). zc fetch: zero-copy gather+decode "
             "of random rows from pinned memory (dOf: offsets in device memory). floor: PCIe "
             "limit of zc fetch (H2D raw / selected fraction). zc raw, dev raw, cpu+H2D: "
             "baselines for the same random rows.", head]
    for r in results:
        cells = [fmt.format(what(r) if callable(what) else r["GBps"][what])
                 for _, what, _, fmt in COLUMNS]
        lines.append(" ".join(cells))
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    from ibp_graph.data.synthetic import FAMILIES

    families = FAMILIES if args.families is None else tuple(args.families.split(","))
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        print(f"unknown families {unknown}; known: {', '.join(FAMILIES)}", file=sys.stderr)
        return 2
    if args.dry_run:
        for name in families:
            t0 = time.perf_counter()
            codec, raw, table, x = build_family(name, args, pin=False)
            check_tiling(codec, raw, table, x)
            print(f"{name:<13} rows={raw.shape[0]:>9} row_nbytes={codec.row_nbytes:>6} "
                  f"W={codec.word_bits} frac={table.nbytes / raw.numel() / raw.element_size():.3f}"
                  f" offsets={table.offsets.dtype} built+checked in {time.perf_counter() - t0:.1f}s")
        return 0
    if not torch.cuda.is_available():
        print("bench_gpu.py needs a CUDA GPU (torch.cuda.is_available() is False); "
              "use --dry-run to check the tables on the CPU", file=sys.stderr)
        return 2
    import cupy

    started = time.perf_counter()
    results, failures = [], {}
    report = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "cupy": cupy.__version__, "python": platform.python_version(),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "families": results, "failures": failures,
    }

    def write_json():  # after every family, so a run cut short still leaves its numbers
        if args.out:
            import os

            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            report["wall_s"] = time.perf_counter() - started
            with open(args.out, "w") as f:
                json.dump(report, f, indent=2)

    for name in families:
        try:
            r = bench_family(name, args)
        except Exception as e:  # one family failing must not hide the others' numbers
            import traceback

            failures[name] = "".join(traceback.format_exception(e))
            print(f"[{time.perf_counter() - started:6.1f}s] {name}: FAILED\n{failures[name]}",
                  file=sys.stderr, flush=True)
            torch.cuda.empty_cache()
            write_json()
            continue
        torch.cuda.empty_cache()
        results.append(r)
        print(f"[{time.perf_counter() - started:6.1f}s] {name}: frac {r['fraction']:.3f}, decode "
              f"{r['GBps']['decode_seq']:.0f} GB/s, zc fetch {r['GBps']['fetch_zc']:.1f} GB/s "
              f"(raw zc {r['GBps']['zc_gather_raw']:.1f}), exact={all(r['bit_exact'].values())}",
              flush=True)
        write_json()
    table = format_table(results)
    report["table"] = table
    print()
    print(torch.cuda.get_device_name(), table, sep="\n")
    write_json()
    if args.out:
        print(f"\nwrote {args.out}")
    ok = not failures and all(all(r["bit_exact"].values()) for r in results)
    if not ok:
        print("ERROR: " + (f"families failed: {sorted(failures)}" if failures else
                           "a GPU decoder's output differs from the raw rows (see 'exact')"),
              file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
