"""The loader benchmark on a tiny graph: every variant runs, and its byte counts add up."""
import json

import pytest

from ibp_graph.benchmarks.loader import VARIANTS, run


def test_loader_benchmark_variants_and_bytes(tmp_path, capsys):
    out = tmp_path / "loader.json"
    rows = run(num_nodes=3000, avg_degree=6, batch_size=64, num_neighbors=(5, 3), batches=3,
               num_workers=0, device="cpu", out=str(out))
    by = {r["variant"]: r for r in rows}
    assert tuple(by) == VARIANTS
    assert all(r["batches"] == 3 for r in rows)
    # identity sends its raw bytes; every compressing variant sends fewer of the same raw bytes
    assert by["identity"]["fraction"] == 1.0
    raw = by["identity"]["raw_mb_per_batch"]
    for v in ("ibp", "ibp-store", "auto-store"):
        assert abs(by[v]["raw_mb_per_batch"] - raw) < 1e-9, v
        assert by[v]["fraction"] < 0.95, v
    # the store saves the worker its per-batch feature encode; auto's store is EBP here, smaller
    assert abs(by["ibp-store"]["mb_per_batch"] / by["ibp"]["mb_per_batch"] - 1) < 0.02
    assert by["auto-store"]["mb_per_batch"] < by["ibp-store"]["mb_per_batch"]
    # without edge ids: the same features, no e_id group (fewer raw and sent bytes), the same batches otherwise
    no_eid = by["auto-store-no-eid"]
    assert no_eid["raw_mb_per_batch"] < by["auto-store"]["raw_mb_per_batch"]
    assert no_eid["mb_per_batch"] < by["auto-store"]["mb_per_batch"]
    # host bytes copied in the worker: identity's encode copies nothing, ibp's writes a payload
    assert 0 < by["identity"]["copied_mb_per_batch"] < by["ibp"]["copied_mb_per_batch"]
    text = capsys.readouterr().out
    assert "MB copied/batch" in text
    assert "auto ebp" in text and "auto-store" in text
    saved = json.loads(out.read_text())
    assert [r["variant"] for r in saved["results"]] == list(VARIANTS)


@pytest.mark.dgl
@pytest.mark.filterwarnings("ignore:Dataloader CPU affinity")
def test_dgl_loader_benchmark_times_dgl_and_ours_on_one_graph(capsys):
    from ibp_graph.benchmarks.loader import DGL_VARIANTS, _have_pyg, run_dgl

    rows = run_dgl(num_nodes=3000, avg_degree=6, batch_size=64, num_neighbors=(5, 3), batches=3,
                   num_workers=[0, 1], rounds=2)
    ours = [v for v in DGL_VARIANTS[1:] if v != "pyg-identity" or _have_pyg()]
    assert [(r["variant"], r["num_workers"]) for r in rows] == [
        (v, w) for w in (0, 1) for v in (DGL_VARIANTS[0], *ours)]
    assert all(r["batches"] == 3 and r["rounds"] == 2 and r["best_batches_per_s"] >= r["batches_per_s"] > 0
               for r in rows)
    assert [r["vs_dgl"] for r in rows if r["variant"] == DGL_VARIANTS[0]] == [1.0, 1.0]
    assert all(r["copied_mb_per_batch"] > 0 for r in rows if r["variant"] != DGL_VARIANTS[0])
    assert "vs DGL DataLoader" in capsys.readouterr().out


def test_first_batch_seconds_times_construction_and_the_first_batch():
    from ibp_graph.benchmarks.loader import first_batch_seconds

    t = first_batch_seconds(num_nodes=2000, codec="identity", num_workers=0)
    assert t["construct_s"] > 0 and t["first_batch_s"] > 0
    assert abs(t["total_s"] - t["construct_s"] - t["first_batch_s"]) < 1e-9


def test_verify_cost_times_a_store_verified_on_read_against_one_opened_unverified(capsys):
    from ibp_graph.benchmarks.loader import run_verify_cost

    r = run_verify_cost(num_nodes=3000, avg_degree=6, batch_size=64, num_neighbors=(5, 3), batches=3, rounds=2,
                        num_workers=0, large_nodes=3000)
    assert set(r["batches_per_s"]) == {"verify-on-read", "verify-none"}
    assert all(len(v) == 2 and min(v) > 0 for v in r["batches_per_s"].values())
    assert 0 < r["chunks_verified_by_batches"] <= r["chunks"]  # the batches verified what they read
    assert r["steady_ratio"] > 0 and r["first_round_ratio"] > 0 and r["check_us_per_batch"] > 0
    assert set(r["first_batch_s"]) == {"verify-on-read", "verify-none"} and r["large_store_mb"] > 1
    assert "verify-on-read vs verify-none" in capsys.readouterr().out


@pytest.mark.dgl
@pytest.mark.filterwarnings("ignore:Dataloader CPU affinity")
def test_dgl_loader_benchmark_times_link_batches_against_dgls_edge_prediction_loader(capsys):
    from ibp_graph.benchmarks.loader import DGL_VARIANTS, run_dgl

    rows = run_dgl(num_nodes=3000, avg_degree=6, batch_size=64, num_neighbors=(5, 3), batches=3,
                   num_workers=[1, 2], rounds=1, task="link")
    ours = [v for v in DGL_VARIANTS[1:] if v != "pyg-identity"]  # PyG has no link row
    assert [(r["variant"], r["num_workers"]) for r in rows] == [
        (v, w) for w in (1, 2) for v in (DGL_VARIANTS[0], *ours)]
    assert all(r["task"] == "link" and r["batches"] == 3 and r["batches_per_s"] > 0 for r in rows)
    by = {(r["variant"], r["num_workers"]): r for r in rows}
    for w in (1, 2):
        identity, auto = by["dgl-identity", w], by["dgl-auto", w]
        assert identity["mb_per_batch"] == identity["raw_mb_per_batch"] > 0  # identity sends what it gathers
        assert auto["mb_per_batch"] < auto["raw_mb_per_batch"]
    text = capsys.readouterr().out
    assert "link batches of 64" in text and "MB sent/batch" in text
    with pytest.raises(ValueError, match=r"task='edge' is not accepted; use one of \('node', 'link'\)"):
        run_dgl(num_nodes=100, task="edge")
