"""The feature-mode benchmark, its graph generator and the gpu_check table, without a GPU: the
generator's shape, a tiny epoch per variant on the CPU stand-in, the table, and the script's dry run."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ibp_graph.benchmarks import features as B
from ibp_graph.benchmarks import gpu_check as G
from ibp_graph.benchmarks.graphs import papers_like, power_law_csc, tile_rows, tiled_store

ROOT = Path(__file__).resolve().parents[2]


def test_power_law_graph_has_the_mean_degree_and_a_heavy_tail():
    g = power_law_csc(50_000, 15, seed=3)
    assert abs(g.num_edges / 50_000 - 15) < 0.5
    deg = np.diff(g.indptr)
    assert deg.max() > 10 * deg.mean()  # power-law in-degrees
    pop = np.sort(np.bincount(g.indices, minlength=50_000))[::-1]
    assert pop[:500].sum() > 0.08 * g.num_edges  # the top 1 % of nodes are cited far more than 1 %
    assert g.indices.dtype == np.int32 and g.e_id.dtype == np.int32


def test_power_law_graph_is_the_same_for_any_thread_count(monkeypatch):
    from ibp_graph.benchmarks import graphs

    monkeypatch.setattr(graphs, "EDGE_CHUNK", 4096)  # several chunks
    a, b = power_law_csc(3000, 8, seed=1, threads=1), power_law_csc(3000, 8, seed=1, threads=3)
    assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
    assert not np.array_equal(a.indices, power_law_csc(3000, 8, seed=2, threads=1).indices)


def test_bad_graph_sizes_are_refused():
    with pytest.raises(ValueError, match="num_nodes=0, avg_degree=5: accepted: num_nodes >= 1"):
        power_law_csc(0, 5)


@pytest.mark.parametrize("codec", ["ibp", "identity"])
def test_a_tiled_store_decodes_to_the_tiled_rows(codec):
    graph, x, y = papers_like(3000, 4, base_rows=1024, seed=0)
    assert graph.num_nodes == x.shape[0] == y.shape[0] == 3072  # rounded up to whole blocks
    assert torch.equal(x[1024:2048], x[:1024])
    store = tiled_store(x[:1024], 3072, codec)
    idx = torch.randint(0, 3072, (500,), generator=torch.Generator().manual_seed(0))
    assert torch.equal(store.decode_rows(idx).view(torch.int32), x[idx].view(torch.int32))
    with pytest.raises(ValueError, match="n_rows=3000 is not a multiple of the block's 1024 rows"):
        tiled_store(x[:1024], 3000, codec)
    assert torch.equal(tile_rows(x[:3], 7), x[:3].repeat(3, 1)[:7])


def test_tiny_epoch_of_every_variant_on_the_cpu(tmp_path, capsys):
    out = tmp_path / "features.json"
    report = B.run(num_nodes=6000, avg_degree=6, base_rows=2000, epoch_seeds=256, batch_size=64,
                   num_neighbors=(4, 2), num_workers=0, device="cpu", device_cache=6000 * 4 + 40_000,
                   out=str(out))
    by = {r["variant"]: r for r in report["results"]}
    assert tuple(by) == B.VARIANTS
    assert all(r["exact"] == "yes" and r["batches"] == 4 for r in by.values())
    assert by["identity-worker"]["vs_identity"] == 1.0 and by["auto-worker"]["vs_resident"] is None
    # zero-copy: the workers send no feature rows; the main process reads the compressed rows
    assert by["auto-zero-copy"]["sent_mb"] < 0.2 * by["auto-worker"]["sent_mb"]
    assert by["auto-zero-copy"]["zero_copy_mb"] == pytest.approx(by["auto-worker"]["sent_mb"]
                                                                 - by["auto-zero-copy"]["sent_mb"], rel=0.05)
    cached = by["auto-zero-copy+cache"]
    assert 0 < cached["hit_rate"] < 1 and cached["cache_mb"] > 0
    assert cached["zero_copy_mb"] + cached["cache_mb"] == pytest.approx(by["auto-zero-copy"]["zero_copy_mb"])
    assert cached["cache"]["x"]["rows"] > cached["cache"]["x"]["raw_rows"]  # compressed rows fit more
    saved = json.loads(out.read_text())
    assert [r["variant"] for r in saved["results"]] == list(B.VARIANTS) and "table" in saved
    text = capsys.readouterr().out
    assert "vs identity-worker" in text and "auto-zero-copy+cache" in text


def test_resident_runs_on_cuda_only_and_ratios_use_it():
    with pytest.raises(ValueError, match=r"variants=\['resident'\] are not accepted on device 'cpu'"):
        B.run(num_nodes=100, variants=["resident"], out=None, quiet=True)
    rows = [{"variant": "identity-worker", "batches_per_s": 2.0}, {"variant": "resident", "batches_per_s": 8.0},
            {"variant": "auto-zero-copy", "batches_per_s": 6.0}]
    B.ratios(rows)
    assert [(r["vs_identity"], r["vs_resident"]) for r in rows] == [(1.0, 0.25), (4.0, 1.0), (3.0, 0.75)]


def test_cli_parses_cache_budgets_as_bytes_or_fractions(monkeypatch):
    seen = {}
    monkeypatch.setattr(B, "run", lambda **kw: seen.update(kw) or {"results": [{"exact": "yes"}]})
    assert B.main(["--device-cache", "0.25", "--num-nodes", "5"]) == 0
    assert seen["device_cache"] == 0.25 and seen["num_nodes"] == 5 and seen["device"] == "cpu"
    assert B.main(["--device-cache", "4096"]) == 0 and seen["device_cache"] == 4096
    monkeypatch.setattr(B, "run", lambda **kw: {"results": [{"exact": "NO"}]})
    assert B.main([]) == 1  # a result that is not bit exact fails the run


def _gpu_report(exact=True):
    g = {"decode_rand_dev": 400.0, "decode_seq": 500.0, "dev_gather_raw": 800.0, "fetch_zc": 50.0,
         "h2d_raw": 55.0}
    return {"families": [{"family": "embedding_f32", "GBps": g, "fetch_floor_GBps": 62.5,
                          "bit_exact": {"decode_seq": exact}, "ebp": {"GBps": dict(g, fetch_zc=40.0),
                                                                      "bit_exact": {"fetch_zc": True}}}],
            "failures": {}}


def _features_report(exact="yes"):
    rows = [{"variant": "identity-worker", "batches_per_s": 2.0, "exact": "yes"},
            {"variant": "auto-zero-copy", "batches_per_s": 6.0, "exact": exact},
            {"variant": "resident", "batches_per_s": 8.0, "exact": "yes"}]
    B.ratios(rows)
    return {"num_nodes": 10_000_000, "results": rows}


def test_the_gpu_check_table_has_every_section_and_ratio(tmp_path):
    gj, fj = tmp_path / "g.json", tmp_path / "f.json"
    gj.write_text(json.dumps(_gpu_report()))
    fj.write_text(json.dumps(_features_report()))
    table, ok = G.summary(str(gj), str(fj))
    assert ok
    assert table.splitlines()[0] == G.LEGEND
    lines = table.splitlines()[1:]
    zc = next(line for line in lines if line.startswith("zero-copy")).split()
    assert zc[1:] == ["embedding_f32", "50.00", "40.00", "55.00", f"{50 / 55:.3f}", "0.800", "yes"]
    dev = next(line for line in lines if line.startswith("decode dev")).split()
    assert dev[2:] == ["embedding_f32", "400.00", "400.00", "800.00", "0.500", "-", "yes"]
    ep = next(line for line in lines if "auto-zero-copy" in line).split()
    assert ep[:2] == ["epoch", "10M"] and ep[2:] == ["auto-zero-copy", "6.00", "-", "8.00", "0.750", "3.000", "yes"]


def test_the_gpu_check_table_fails_on_a_missing_section_or_a_mismatch(tmp_path, capsys):
    gj, fj = tmp_path / "g.json", tmp_path / "f.json"
    gj.write_text(json.dumps(_gpu_report(exact=False)))
    fj.write_text(json.dumps(_features_report()))
    assert G.summary(str(gj), str(fj))[1] is False
    gj.write_text(json.dumps(_gpu_report()))
    fj.write_text(json.dumps(_features_report(exact="NO")))
    assert G.summary(str(gj), str(fj))[1] is False
    assert G.main(["--gpu-json", str(gj), "--features-json", str(tmp_path / "none.json")]) == 1
    assert f"missing: {tmp_path / 'none.json'}" in capsys.readouterr().out


def test_gpu_check_script_parses_and_its_dry_run_ends_with_the_table(tmp_path):
    script = ROOT / "scripts" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    env = dict(os.environ, DRY_RUN="1", PYTHON=sys.executable, OUT=str(tmp_path))
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tail = done.stdout[done.stdout.index("== gpu_check table"):]
    assert "auto-zero-copy+cache" in tail and "missing:" in tail  # no GPU: no decode section
    assert "gpu_check: OK" in tail
    assert (tmp_path / "features_gpu.json").is_file() and (tmp_path / "gpu_check_table.txt").is_file()
