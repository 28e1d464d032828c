#!/usr/bin/env python3
"""GPU benchmark: IBP and EBP decoders against the plain transfer baselines, per synthetic family.

For each family of ``ibp_graph.data.synthetic`` it builds a table of >= 2M rows (generated
rows tiled, capped at --max-table-bytes for wide rows), fits IBP and EBP on it and encodes
it with each, then measures with CUDA events (warm-up, median of --reps), for each codec:

  decode_seq        whole compressed table in device memory -> decoded rows (in order)
  decode_rand_dev   --index-rows random rows gathered + decoded from device memory
  copy_decode       pinned compressed table -> H2D copy -> decode (effective, whole table)
  fetch_zc          random rows gathered + decoded straight from pinned host memory
                    (offsets in host memory: "host offs"; in device memory: "dev offs", IBP only)
and, in the same run, the baselines:
  h2d_raw           pinned H2D copy of the raw table
  zc_gather_raw     zero-copy gather of the same random raw rows (ibp_graph.gpu.gather_raw_rows)
  dev_gather_raw    torch.index_select of the same rows from device memory
  cpu_gather_h2d    torch.index_select on the CPU into pinned memory, then H2D copy

Every rate is decoded (raw) bytes delivered per second, GB = 1e9 bytes. Each decoder's
output is checked bit for bit against the raw rows once before timing. Prints one table
and writes JSON (--out): IBP's numbers at the top level of each family, EBP's under
"ebp" with the same keys. ``--dry-run`` builds and checks the tables on the CPU only.
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

from ibp_graph.benchmarks.args import nonnegative_int, out_file, positive_float, positive_int

GB = 1e9
#: the codecs measured (ibp_graph.gpu decodes each, dispatching on the codec).
CODECS = ("ibp", "ebp")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--families", default=None,
                   help="comma-separated subset of ibp_graph.data.synthetic.FAMILIES")
    p.add_argument("--table-rows", type=positive_int, default=2_000_000, help="rows per table (tiled)")
    p.add_argument("--max-table-bytes", type=positive_float, default=3 * 2**30,
                   help="cap on a raw table's bytes (wide rows get fewer rows)")
    p.add_argument("--base-rows", type=positive_int, default=65536, help="rows generated before tiling")
    p.add_argument("--index-rows", type=positive_int, default=200_000, help="rows per random gather")
    p.add_argument("--reps", type=positive_int, default=7, help="timed repetitions (median reported)")
    p.add_argument("--warmup", type=nonnegative_int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=out_file, default=None, help="write the results as JSON here")
    p.add_argument("--dry-run", action="store_true",
                   help="build and check the tables on the CPU, time nothing (no GPU needed)")
    return p.parse_args(argv)


# --------------------------------------------------------------------------- tables
def tile_rows(x: torch.Tensor, k: int, pin: bool) -> torch.Tensor:
    """x repeated k times along rows, written straight into (pinned) host memory."""
    from ibp_graph.benchmarks.graphs import tile_rows as tile

    return tile(x, x.shape[0] * k, pin)


def tile_compressed(ct, k: int, pin: bool):
    """A CompressedTensor of ct's rows repeated k times (payload copied, offsets shifted)."""
    from ibp_graph.benchmarks.graphs import tile_compressed as tile

    return tile(ct, k, pin)


def fit_kind(kind: str, x: torch.Tensor):
    """The codec `kind` ("ibp" or "ebp") fitted on the base rows."""
    from ibp_graph.codec import EBPCodec, IBPCodec

    return {"ibp": IBPCodec, "ebp": EBPCodec}[kind].fit(x)


def unchecked():
    """A PendingChecks nobody reads: a timed call skips its error check (no host wait); every
    decoder's output was checked bit for bit, with its error checks, before timing."""
    from ibp_graph.gpu import PendingChecks

    return PendingChecks()


def gpu_entry_points(kind: str):
    """(decode, fetch) on the GPU for codec `kind`: decode(codec, ct, out=, check=) and
    fetch(codec, table, index, out=, check=), where check=False skips the error check.
    ibp_graph.gpu dispatches on the codec itself; `kind` is the benchmark's hook."""
    from ibp_graph import gpu

    def decode(codec, ct, out=None, check=True):
        return gpu.decode(codec, ct, out=out, checks=None if check else unchecked())

    def fetch(codec, table, index, out=None, check=True):
        return gpu.fetch(codec, table, index, out=out, checks=None if check else unchecked())

    return decode, fetch


def build_family(name: str, args, pin: bool):
    """(raw table, base rows, {codec name: (codec, compressed table)}) for one family."""
    from ibp_graph.data.synthetic import make_family

    probe = make_family(name, 8, seed=args.seed)
    row_nbytes = probe[0].numel() * probe.element_size()
    base = max(1024, min(args.base_rows, int(2**29 // row_nbytes)))
    x = make_family(name, base, seed=args.seed)
    want_rows = max(base, min(args.table_rows, int(args.max_table_bytes // row_nbytes)))
    k = max(1, math.ceil(want_rows / base))
    raw = tile_rows(x, k, pin)
    tables = {}
    for kind in CODECS:
        codec = fit_kind(kind, x)
        tables[kind] = (codec, tile_compressed(codec.encode(x), k, pin))
    return raw, x, tables


def check_tiling(codec, raw, table, x, n_check: int = 4096) -> None:
    """CPU check that the tiled compressed table is well formed (offsets, tail padding) and
    decodes to the tiled raw rows (a sample)."""
    from ibp_graph.layout.tensor import check_offsets

    check_offsets(table)  # raises CorruptPayloadError naming what is wrong
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


#: rates over the whole table (the others are over the --index-rows random rows).
WHOLE = {"decode_seq", "copy_decode", "h2d_raw"}


def rates(seconds: dict, raw_bytes: int, index_raw_bytes: int) -> dict:
    """GB/s of decoded rows for each timing: the whole table's bytes or the random rows'."""
    return {k: (raw_bytes if k in WHOLE else index_raw_bytes) / v / GB for k, v in seconds.items()}


def bench_codec(kind: str, codec, table, raw_dev, index, index_cpu, out_all, out_idx, args) -> dict:
    """One codec's GPU decoders on one family: bit-exact checks, then timings (seconds)."""
    decode, fetch = gpu_entry_points(kind)
    dev = raw_dev.device
    table_dev = table.to(dev)
    want_idx = raw_dev[index]
    runs = {  # name -> fn(check): each writes out_all (whole table) or out_idx (random rows)
        "decode_seq": lambda check: decode(codec, table_dev, out=out_all, check=check),
        "decode_rand_dev": lambda check: fetch(codec, table_dev, index, out=out_idx, check=check),
        "copy_decode": lambda check: decode(codec, table.to(dev, non_blocking=True), out=out_all,
                                            check=check),
        "fetch_zc": lambda check: fetch(codec, table, index, out=out_idx, check=check),
    }
    if kind == "ibp":  # IBP's fused fetch also reads offsets from device memory
        table_dev_offs = dataclasses.replace(table, offsets=table.offsets.to(dev))
        runs["fetch_zc_dev_offs"] = lambda check: fetch(codec, table_dev_offs, index, out=out_idx,
                                                        check=check)
    # correctness first (bit exact, once, with error checks on), each into a poisoned output so
    # that a decoder which leaves rows unwritten cannot pass on an earlier decoder's output
    checks = {}
    for k, fn in runs.items():
        out, want = (out_all, raw_dev) if k in WHOLE else (out_idx, want_idx)
        out.reshape(-1).view(torch.uint8).fill_(0xFF)
        checks[k] = same_bits(fn(True), want)
    t = {k: timed(lambda fn=fn: fn(False), args.reps, args.warmup) for k, fn in runs.items()}
    t["h2d_compressed"] = timed(lambda: table.to(dev, non_blocking=True), args.reps, args.warmup)
    lengths = table.offsets[1:].to(torch.int64) - table.offsets[:-1].to(torch.int64)
    return {"checks": checks, "seconds": t, "lengths": lengths,
            "sel_bytes": int(lengths[index_cpu].sum())}


def codec_result(table, measured: dict, raw_bytes: int, m: int, rb: int,
                 h2d_raw_GBps: float) -> dict:
    """A codec's fraction, GB/s of decoded rows, checks and the PCIe floor of its fetch."""
    t, lengths, sel_bytes = measured["seconds"], measured["lengths"], measured["sel_bytes"]
    rate = rates(t, raw_bytes, m * rb)
    rate["h2d_compressed"] = table.nbytes / t["h2d_compressed"] / GB  # bytes actually moved
    return {
        "fraction": table.nbytes / raw_bytes,
        "fraction_selected": (sel_bytes + 4 * m) / (m * rb),
        "raw_rows_fraction": float((lengths == rb).double().mean()),
        "seconds": t, "GBps": rate, "bit_exact": measured["checks"],
        # PCIe floor of the fetch: the selected rows' compressed bytes at H2D speed
        "fetch_floor_GBps": h2d_raw_GBps * (m * rb) / max(1, sel_bytes + 4 * m),
    }


def bench_family(name: str, args) -> dict:
    from ibp_graph.gpu import gather_raw_rows

    t0 = time.perf_counter()
    raw, _, tables = build_family(name, args, pin=True)
    dev = torch.device("cuda")
    n, rb = raw.shape[0], raw[0].numel() * raw.element_size()
    raw_bytes = n * rb
    setup_s = time.perf_counter() - t0

    raw_dev = raw.to(dev)
    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    index_cpu = torch.randint(0, n, (args.index_rows,), generator=gen)
    index = index_cpu.to(dev)
    m = args.index_rows
    out_all = torch.empty_like(raw_dev)
    out_idx = torch.empty((m,) + tuple(raw.shape[1:]), dtype=raw.dtype, device=dev)
    out_raw = torch.empty_like(out_idx)
    pinned_rows = torch.empty_like(out_idx, device="cpu").pin_memory()

    R, Wm = args.reps, args.warmup
    baseline_checks = {"zc_gather_raw": same_bits(gather_raw_rows(raw, index, out=out_raw),
                                                  raw_dev[index])}
    baseline = {
        "h2d_raw": timed(lambda: raw.to(dev, non_blocking=True), R, Wm),
        "zc_gather_raw": timed(lambda: gather_raw_rows(raw, index, out=out_raw, checks=unchecked()),
                               R, Wm),
        "dev_gather_raw": timed(lambda: torch.index_select(raw_dev, 0, index, out=out_raw), R, Wm),
        "cpu_gather_h2d": timed(lambda: out_raw.copy_(
            torch.index_select(raw, 0, index_cpu, out=pinned_rows), non_blocking=True), R, Wm),
    }
    h2d_raw_GBps = raw_bytes / baseline["h2d_raw"] / GB
    per_codec = {}
    for kind, (codec, table) in tables.items():
        measured = bench_codec(kind, codec, table, raw_dev, index, index_cpu, out_all, out_idx, args)
        per_codec[kind] = codec_result(table, measured, raw_bytes, m, rb, h2d_raw_GBps)
        torch.cuda.empty_cache()  # this codec's device copy of the table is gone
    ibp_codec = tables["ibp"][0]
    ebp_codec = tables["ebp"][0]
    result = per_codec["ibp"]  # IBP at the top level, as before EBP was added
    result["seconds"].update(baseline)
    result["GBps"].update(rates(baseline, raw_bytes, m * rb))
    result["bit_exact"].update(baseline_checks)
    result.update({
        "family": name, "dtype": str(raw.dtype).replace("torch.", ""),
        "row_shape": list(raw.shape[1:]), "row_nbytes": rb, "table_rows": n,
        "word_bits": ibp_codec.word_bits, "threshold": getattr(ibp_codec, "threshold", None),
        "index_rows": m, "setup_s": setup_s,
        "ebp": dict(per_codec["ebp"], tables=ebp_codec.n_tables, sparse=ebp_codec.sparse),
    })
    return result  # the tables die with this frame; main() empties the CUDA cache


def all_exact(r: dict) -> bool:
    """Whether every decoder (IBP, EBP and the raw baselines) matched the raw rows."""
    return all(r["bit_exact"].values()) and all(r["ebp"]["bit_exact"].values())


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
    ("E frac", lambda r: r["ebp"]["fraction"], 6, "{:>6.3f}"),
    ("E dec", lambda r: r["ebp"]["GBps"]["decode_seq"], 6, "{:>6.0f}"),
    ("E zc", lambda r: r["ebp"]["GBps"]["fetch_zc"], 6, "{:>6.1f}"),
    ("exact", lambda r: "yes" if all_exact(r) else "NO", 5, "{:>5}"),
]


def format_table(results: list[dict]) -> str:
    """One line per family, GB/s of decoded rows."""
    head = " ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, _, w, _) in enumerate(COLUMNS))
    lines = ["GB/s of decoded rows (1e9 B/s). frac: compressed/raw bytes. dec seq/rand: decode "
             "from device memory (whole table / random rows). zc fetch: zero-copy gather+decode "
             "of random rows from pinned memory (dOf: offsets in device memory). floor: PCIe "
             "limit of zc fetch (H2D raw / selected fraction). zc raw, dev raw, cpu+H2D: "
             "baselines for the same random rows. Columns up to cpu+H2D are IBP's; E frac, "
             "E dec, E zc: EBP's fraction, decode (whole table) and zc fetch.", head]
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
            raw, x, tables = build_family(name, args, pin=False)
            raw_bytes = raw.numel() * raw.element_size()
            fracs = []
            for kind, (codec, table) in tables.items():
                check_tiling(codec, raw, table, x)
                fracs.append(f"{kind} frac={table.nbytes / raw_bytes:.3f} offsets={table.offsets.dtype}")
            print(f"{name:<13} rows={raw.shape[0]:>9} row_nbytes={raw_bytes // raw.shape[0]:>6} "
                  f"IBP W={tables['ibp'][0].word_bits} {' '.join(fracs)} "
                  f"built+checked in {time.perf_counter() - t0:.1f}s")
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
        e = r["ebp"]
        print(f"[{time.perf_counter() - started:6.1f}s] {name}: IBP frac {r['fraction']:.3f}, decode "
              f"{r['GBps']['decode_seq']:.0f} GB/s, zc fetch {r['GBps']['fetch_zc']:.1f} GB/s; EBP "
              f"frac {e['fraction']:.3f}, decode {e['GBps']['decode_seq']:.0f} GB/s, zc fetch "
              f"{e['GBps']['fetch_zc']:.1f} GB/s (raw zc {r['GBps']['zc_gather_raw']:.1f}), "
              f"exact={all_exact(r)}", flush=True)
        write_json()
    table = format_table(results)
    report["table"] = table
    print()
    print(torch.cuda.get_device_name(), table, sep="\n")
    write_json()
    if args.out:
        print(f"\nwrote {args.out}")
    ok = not failures and all(all_exact(r) for r in results)
    if not ok:
        print("ERROR: " + (f"families failed: {sorted(failures)}" if failures else
                           "a GPU decoder's output differs from the raw rows (see 'exact')"),
              file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
