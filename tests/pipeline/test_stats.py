"""LoaderStats: totals, as_dict for JSON, the printed tables, reset."""
import json

import pytest

from ibp_graph.pipeline.stats import STAGES, LoaderStats


def _stats() -> LoaderStats:
    s = LoaderStats()
    s.batches = 4
    s.add_group("float32[128]", 1000, 250)
    s.add_group("float32[128]", 1000, 250)
    s.add_group("int64[*]", 400, 100)
    s.add_time("sample", 0.5)
    s.add_time("decode", 0.25)
    s.add_copied(3000)
    s.add_copied(1000)
    return s


def test_totals_and_as_dict():
    s = _stats()
    assert s.total_raw_bytes == 2400 and s.total_sent_bytes == 600 and s.fraction == 0.25
    d = json.loads(json.dumps(s.as_dict()))
    assert d == {"batches": 4, "raw_bytes": {"float32[128]": 2000, "int64[*]": 400},
                 "sent_bytes": {"float32[128]": 500, "int64[*]": 100},
                 "seconds": {"sample": 0.5, "decode": 0.25}, "fraction": 0.25,
                 "copied_bytes": 4000, "copied_bytes_per_batch": 1000.0, "codecs": {}}


def test_table_names_every_group_and_stage():
    text = _stats().table()
    assert text.startswith("4 batches")
    lines = text.splitlines()
    row = next(line for line in lines if line.startswith("float32[128]"))
    assert row.split() == ["float32[128]", "0.00", "0.00", "0.2500"]
    assert next(line for line in lines if line.startswith("total")).split()[-1] == "0.2500"
    for stage in STAGES:
        assert any(line.startswith(stage) for line in lines), stage
    sample = next(line for line in lines if line.startswith("sample"))
    assert sample.split() == ["sample", "0.500", "125.00"]  # seconds, ms per batch
    assert "host bytes copied in workers: 0.00 MB/batch" in lines  # 1000 B per batch
    assert str(_stats()) == text


def test_reset_and_unknown_stage():
    s = _stats()
    s.reset()
    assert s.batches == 0 and s.total_raw_bytes == 0 and s.fraction == 1.0 and not s.seconds
    assert s.as_dict()["raw_bytes"] == {}
    assert s.copied_bytes == 0 and s.copied_bytes_per_batch == 0.0
    with pytest.raises(ValueError, match="nbytes=-1 is negative"):
        s.add_copied(-1)
    with pytest.raises(ValueError, match="stage='fetch' is unknown; stages: \\('sample'"):
        s.add_time("fetch", 1.0)
