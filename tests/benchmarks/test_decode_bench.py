"""The decode benchmark runs end to end: every codec and thread count gets a row with positive
speeds (its exactness check passed, else it raises), bad arguments are named."""
from __future__ import annotations

import json

import pytest

from ibp_graph.benchmarks.decode import main, run


def test_decode_bench_reports_every_codec_and_thread_count(tmp_path, capsys):
    out = tmp_path / "decode.json"
    assert main(["--rows", "3000", "--batch", "700", "--threads", "1", "--repeat", "1",
                 "--out", str(out)]) == 0
    assert "gather+decode GB/s" in capsys.readouterr().out
    rows = json.loads(out.read_text())["results"]
    assert [(r["codec"], r["threads"]) for r in rows] == [("ibp", 1), ("ebp", 1)]
    for r in rows:
        assert r["batch"] == 700 and 0 < r["fraction"] < 1
        for k in ("gather_gbps", "decode_gbps", "decode_out_gbps", "gather_decode_gbps", "placed_gbps", "out_rows_gbps", "pooled_gbps",
                  "contiguous_gbps"):
            assert r[k] > 0


@pytest.mark.parametrize("kw, match", [({"rows": 0}, "rows=0 is not accepted"),
                                       ({"batch": -1}, "batch=-1 is not accepted"),
                                       ({"threads": [0]}, r"threads=\[0\] is not accepted"),
                                       ({"codecs": ["zstd"]}, r"codecs=\['zstd'\] is not accepted")])
def test_decode_bench_names_bad_arguments(kw, match):
    args = {"out": None, "quiet": True, **kw}
    with pytest.raises(ValueError, match=match):
        run(**args)
