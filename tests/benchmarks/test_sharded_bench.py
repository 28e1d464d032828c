"""The sharded-features benchmark on a tiny graph, 2 ranks, unlimited loopback: the script runs its rank
processes, writes its JSON and ends with the ratio line; identity receives exactly the raw bytes of its
remote rows, auto fewer of the same rows, and the cache serves some remote rows."""
import json
import subprocess
import sys
from pathlib import Path

from ibp_graph.benchmarks.sharded import VARIANTS

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_sharded.py"


def test_sharded_benchmark_json_and_bytes(tmp_path):
    out = tmp_path / "sharded.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--ranks", "2", "--num-nodes", "4096", "--batch-size", "64",
                           "--num-neighbors", "6", "4", "--batches", "2", "--rounds", "1", "--num-workers", "0",
                           "--timeout", "120", "--out", str(out)], capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("auto/identity batches/s: ")
    saved = json.loads(out.read_text())
    assert saved["benchmark"] == "sharded" and saved["ranks"] == 2
    assert saved["network"]["limit"] is None and saved["network"]["private_namespace"] is False
    assert float(last.rsplit(" ", 1)[1]) == round(saved["auto_vs_identity"], 3)
    by = {r["variant"]: r for r in saved["results"]}
    assert tuple(by) == VARIANTS
    for r in by.values():
        assert r["batches_per_s"] > 0 and len(r["ranks"]) == 2
        assert all(k["batches"] == 2 for k in r["ranks"])
        assert 0.3 < r["local_fraction"] < 0.7  # contiguous halves, seeds and neighbours spread over both
    for rank in range(2):
        ident, auto, cached = (by[v]["ranks"][rank]["shard"] for v in VARIANTS)
        assert ident["remote_rows"] > 0 and ident["wire_bytes"] == ident["remote_raw_bytes"]
        # the same rows (same seeds, same sampler), compressed: fewer bytes for them, lengths included
        assert auto["remote_rows"] == ident["remote_rows"] and auto["remote_raw_bytes"] == ident["remote_raw_bytes"]
        assert auto["wire_bytes"] < 0.9 * ident["wire_bytes"]
        assert cached["remote_hits"] > 0 and cached["remote_rows"] + cached["remote_hits"] == ident["remote_rows"]
        assert cached["wire_bytes"] < auto["wire_bytes"]
    assert abs(saved["stores"]["identity"]["fraction"] - 1) < 1e-3 and saved["stores"]["auto"]["fraction"] < 0.9
    assert 0 < saved["cache_bytes"] and by["auto-cache"]["cache_mb"] * 1e6 <= saved["cache_bytes"]
