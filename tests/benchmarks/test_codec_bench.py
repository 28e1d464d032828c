"""The codec benchmark runs end to end on a small family and reports the gather's speed and
what its bounds checks add."""
from __future__ import annotations

import math

from ibp_graph.benchmarks.codec import run


def test_codec_bench_reports_gather_and_its_checks(tmp_path):
    rows = run(["tfidf"], mbytes=0.2, repeat=1, out=str(tmp_path / "codec.json"), quiet=True)
    (row,) = rows
    assert row["family"] == "tfidf" and 0 < row["fraction"] < 1
    assert row["gather_gbps"] > 0 and math.isfinite(row["gather_check_pct"])
    assert (tmp_path / "codec.json").exists()
