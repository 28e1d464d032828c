"""The row gather benchmark runs end to end: both gathers agree bit for bit, speeds are reported
for the kernel's sizes and for one past its limit (index_select's path), bad arguments are named."""
from __future__ import annotations

import json

import pytest

from ibp_graph.benchmarks.gather import main, run
from ibp_graph.layout.rows import RAW_GATHER_MAX_ROW_NBYTES


def test_gather_bench_compares_both_gathers(tmp_path, capsys):
    sizes = [8, 36, RAW_GATHER_MAX_ROW_NBYTES + 8]
    out = tmp_path / "gather.json"
    assert main(["--table-gb", "0.002", "--rows", "3000", "--repeat", "1", "--out", str(out),
                 "--row-bytes", *map(str, sizes)]) == 0
    printed = capsys.readouterr().out
    assert "gather_rows/index_select" in printed
    rows = json.loads(out.read_text())["results"]
    assert [r["row_bytes"] for r in rows] == sizes
    for r in rows:
        assert r["exact"] == "yes" and r["index_select_gbps"] > 0 and r["gather_rows_gbps"] > 0
    assert rows[-1]["rows"] == 2_000_000 // (RAW_GATHER_MAX_ROW_NBYTES + 8)  # capped at the table's rows


@pytest.mark.parametrize("kw, match", [({"table_gb": 0}, "table_gb=0 is not accepted"),
                                       ({"row_bytes": [0, 8]}, r"row_bytes=\[0, 8\] is not accepted: \[0\]"),
                                       ({"table_gb": 1e-9}, "holds no row of 512 bytes"),
                                       ({"threads": 0}, "threads=0 is not accepted")])
def test_gather_bench_names_bad_arguments(kw, match):
    args = {"row_bytes": [512], "out": None, "quiet": True, **kw}
    with pytest.raises(ValueError, match=match):
        run(args.pop("row_bytes"), **args)
