"""scripts/bench_sampler.py runs, prints its table and writes JSON whose numbers add up."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_sampler.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_sampler", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(tmp_path, capsys, *extra):
    out = tmp_path / "s.json"
    rc = _load().main(["--num-nodes", "3000", "--batch-size", "64", "--batches", "2", "--repeat", "1",
                       "--num-neighbors", "4", "3", "--out", str(out), *extra])
    assert rc == 0
    return json.loads(out.read_text()), capsys.readouterr().out


def test_sampler_benchmark_ours(tmp_path, capsys):
    data, printed = _run(tmp_path, capsys, "--no-dgl")
    row, no_ids = data["rows"]
    assert row["sampler"] == "ibp-graph NeighborSampler" and "ibp-graph NeighborSampler" in printed
    assert no_ids["sampler"] == "ibp-graph NeighborSampler, edge_ids=False" and no_ids["sampler"] in printed
    assert row["edges"] == no_ids["edges"] > 0 and row["seconds"] > 0  # the same draws, without edge ids
    assert row["seeds_per_s"] == pytest.approx(2 * 64 / row["seconds"])
    assert row["edges_per_s"] == pytest.approx(row["edges"] / row["seconds"])
    assert no_ids["vs_ours"] == pytest.approx(row["seconds"] / no_ids["seconds"])
    assert row["vs_ours"] == 1.0 and data["args"]["num_neighbors"] == [4, 3]


def test_sampler_benchmark_refuses_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        _load().main(["--num-neighbors", "5", "0"])
    assert "argument --num-neighbors: '0' is not accepted; expected an integer >= 1, or -1" in capsys.readouterr().err


@pytest.mark.dgl
def test_sampler_benchmark_with_dgl(tmp_path, capsys):
    data, printed = _run(tmp_path, capsys)
    assert [r["sampler"].split()[0] for r in data["rows"]] == ["ibp-graph", "ibp-graph", "DGL"]
    dgl_row = data["rows"][2]
    # DGL re-samples earlier hops' nodes at each layer, so it never samples fewer edges
    assert dgl_row["edges"] >= data["rows"][0]["edges"] > 0
    assert "DGL" in printed
