"""scripts/bench_gpu.py without a GPU: its CLI, its tables (IBP and EBP per family) and its
per-codec measuring code, run with CPU stand-ins for the CUDA decoders and timers."""
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_gpu.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cli_is_unchanged(bench):
    a = bench.parse_args([])
    assert (a.families, a.table_rows, a.base_rows, a.index_rows, a.reps, a.warmup, a.seed, a.out,
            a.dry_run) == (None, 2_000_000, 65536, 200_000, 7, 2, 0, None, False)
    a = bench.parse_args(["--families", "tfidf", "--reps", "3", "--out", "x.json", "--dry-run"])
    assert (a.families, a.reps, a.out, a.dry_run) == ("tfidf", 3, "x.json", True)
    assert bench.CODECS == ("ibp", "ebp")


def cpu_entry_points(kind, broken=None):
    """decode/fetch with the GPU functions' signatures, on the CPU (fetch = gather, then decode).

    broken="wrong": fetch gets one row wrong; "lazy": fetch writes its output only on its
    first call (the second returns whatever the output buffer held).
    """
    calls = []

    def decode(codec, ct, out=None, check=True):
        return codec.decode(ct, out=out)

    def fetch(codec, table, index, out=None, check=True):
        calls.append(1)
        if broken == "lazy" and len(calls) > 1:
            return out
        rows = codec.decode(table.index_select(index.cpu()), out=out)
        if broken == "wrong":
            rows[0] = rows[0] + 1
        return rows

    return decode, fetch


def cpu_timed(fn, reps, warmup):
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return max(time.perf_counter() - t, 1e-6) / reps


def measure_family(bench, monkeypatch, broken_ebp=None):
    """What bench_family assembles, with CPU stand-ins: one result dict (IBP top level, EBP under "ebp")."""
    monkeypatch.setattr(bench, "timed", cpu_timed)
    monkeypatch.setattr(bench, "gpu_entry_points",
                        lambda kind: cpu_entry_points(kind, broken=broken_ebp if kind == "ebp" else None))
    args = bench.parse_args(["--table-rows", "3000", "--base-rows", "1024", "--index-rows", "500",
                             "--reps", "2", "--warmup", "1"])
    raw, x, tables = bench.build_family("embedding_f32", args, pin=False)
    n, rb = raw.shape[0], raw[0].numel() * raw.element_size()
    index_cpu = torch.randint(0, n, (args.index_rows,), generator=torch.Generator().manual_seed(0))
    out_all = torch.empty_like(raw)
    out_idx = torch.empty((args.index_rows,) + tuple(raw.shape[1:]), dtype=raw.dtype)
    per = {}
    for kind, (codec, table) in tables.items():
        measured = bench.bench_codec(kind, codec, table, raw, index_cpu, index_cpu, out_all, out_idx, args)
        per[kind] = bench.codec_result(table, measured, n * rb, args.index_rows, rb, h2d_raw_GBps=20.0)
    result = per["ibp"]
    result.update({"family": "embedding_f32", "table_rows": n,
                   "ebp": dict(per["ebp"], tables=tables["ebp"][0].n_tables, sparse=tables["ebp"][0].sparse)})
    result["GBps"].update(bench.rates({"h2d_raw": 0.01, "zc_gather_raw": 0.01, "dev_gather_raw": 0.01,
                                       "cpu_gather_h2d": 0.01}, n * rb, args.index_rows * rb))
    return result, tables


def test_both_codecs_are_checked_timed_and_tabled(bench, monkeypatch):
    r, tables = measure_family(bench, monkeypatch)
    for kind, res in (("ibp", r), ("ebp", r["ebp"])):
        assert set(res["bit_exact"]) >= {"decode_seq", "decode_rand_dev", "copy_decode", "fetch_zc"}
        assert all(res["bit_exact"].values()), kind
        assert set(res["GBps"]) >= {"decode_seq", "fetch_zc", "h2d_compressed"} and res["GBps"]["fetch_zc"] > 0
        assert res["fraction"] == pytest.approx(tables[kind][1].nbytes / (r["table_rows"] * 512))
        assert 0 < res["fraction_selected"] < 1 and res["fetch_floor_GBps"] > 20.0
    assert "fetch_zc_dev_offs" in r["bit_exact"] and "fetch_zc_dev_offs" not in r["ebp"]["bit_exact"]
    assert r["ebp"]["fraction"] < r["fraction"]  # EBP is the smaller codec on averaged embeddings
    assert bench.all_exact(r)
    text = bench.format_table([r])
    head, row = text.splitlines()[-2:]
    for col in ("frac", "dec seq", "zc fetch", "E frac", "E dec", "E zc", "exact"):
        assert col in head
    assert row.startswith("embedding_f32") and row.endswith("yes")
    assert f"{r['ebp']['fraction']:.3f}" in row and f"{r['fraction']:.3f}" in row
    assert len(head) == len(row)  # columns line up


@pytest.mark.parametrize("broken", ["wrong", "lazy"])
def test_a_wrong_ebp_fetch_is_reported(bench, monkeypatch, broken):
    r, _ = measure_family(bench, monkeypatch, broken_ebp=broken)
    assert all(r["bit_exact"].values())  # IBP fine
    assert r["ebp"]["bit_exact"]["fetch_zc"] is False and r["ebp"]["bit_exact"]["decode_seq"] is True
    # lazy: the first fetch (random rows from device memory) was right, the second wrote nothing
    assert r["ebp"]["bit_exact"]["decode_rand_dev"] is (broken == "lazy")
    assert not bench.all_exact(r)
    assert bench.format_table([r]).splitlines()[-1].endswith("NO")


def test_dry_run_builds_and_checks_ibp_and_ebp_tables():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--families", "embedding_f16,random_bits",
                           "--table-rows", "5000", "--base-rows", "2048"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == ["embedding_f16", "random_bits"]
    assert all("ibp frac=" in ln and "ebp frac=" in ln for ln in lines)
