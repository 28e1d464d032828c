"""`ibp-graph train` with loader.framework=dgl: the shared loop trains DGL's GraphSAGE (in .venv-dgl)."""
import json
import os
import subprocess
import sys

import pytest

TINY = ["data.synthetic.num_nodes=1500", "data.synthetic.avg_citations=5", "data.synthetic.labeled_fraction=0.6",
        "loader.batch_size=128", "loader.eval_batch_size=512", "loader.num_workers=0", "model.hidden=32",
        "output.progress=false", "loader.device=cpu", "loader.framework=dgl", "train.epochs=2", "name=tinydgl"]


def _train(tmp_path, *extra, env=None):
    sets = TINY + [f"data.root={tmp_path / 'data'}", f"output.dir={tmp_path / 'runs'}", *extra]
    cmd = [sys.executable, "-m", "ibp_graph.cli", "train"] + [a for s in sets for a in ("--set", s)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, DGLBACKEND="pytorch", **(env or {})))


@pytest.mark.dgl
def test_dgl_trains_identically_with_identity_and_auto(tmp_path):
    r = _train(tmp_path, "loader.codecs=[identity, auto]", "loader.num_workers=1")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    runs = {}
    for f in (tmp_path / "runs").glob("tinydgl-*.json"):
        rec = json.loads(f.read_text())
        runs[rec["codec"]] = rec
    assert set(runs) == {"identity", "auto"}
    auto, ident = runs["auto"], runs["identity"]
    assert auto["framework"] == ident["framework"] == "dgl" and auto["features"] == "table"
    assert [e["loss"] for e in auto["epochs"]] == [e["loss"] for e in ident["epochs"]]  # exactly
    assert [e["test_acc"] for e in auto["epochs"]] == [e["test_acc"] for e in ident["epochs"]]
    for a, b in zip(auto["epochs"], ident["epochs"]):
        assert a["raw_bytes"] == b["raw_bytes"] == b["sent_bytes"] > a["sent_bytes"]  # compressed, same rows
    assert set(ident["group_codecs"].values()) == {"identity"} and "float32[128]" in auto["group_codecs"]
    assert auto["epochs"][1]["loss"] < auto["epochs"][0]["loss"]
    assert auto["final"]["test_acc"] > auto["final"]["majority_test_acc"]
    assert r.stdout.count("epoch  1/2") == 2 and "(dgl)" in r.stdout


@pytest.mark.dgl
def test_dgl_refuses_a_model_it_does_not_build_before_loading_data(tmp_path):
    r = _train(tmp_path, "model.arch=gat")
    assert r.returncode == 2  # a config error, as every other (it was 1, from the front-end)
    assert "model.arch='gat' is not accepted with loader.framework='dgl'; expected one of ['sage']" in r.stderr
    assert not (tmp_path / "data").exists()  # refused before any data was generated


LINK = ["task=link", "data.name=synthetic-citation", "data.citation.num_nodes=2000", "data.citation.dim=32",
        "data.citation.num_negatives=50", "data.citation.eval_fraction=0.15", "loader.batch_size=256",
        "loader.eval_batch_size=1024", "loader.num_workers=1", "model.hidden=32", "output.progress=false",
        "loader.device=cpu", "loader.framework=dgl", "train.epochs=2", "name=tinydgllink"]


@pytest.mark.dgl
def test_dgl_link_training_equals_dgls_own_loader_for_auto_and_identity(tmp_path):
    sets = LINK + [f"data.root={tmp_path / 'data'}", f"output.dir={tmp_path / 'runs'}", "loader.codecs=[auto, identity]"]
    cmd = [sys.executable, "-m", "ibp_graph.cli", "train", "--baseline"] + [a for s in sets for a in ("--set", s)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, DGLBACKEND="pytorch"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    runs = {rec["codec"]: rec for rec in (json.loads(f.read_text()) for f in (tmp_path / "runs").glob("tinydgllink-*.json"))}
    assert set(runs) == {"auto", "identity", "native"}  # native: DGL's own edge-prediction DataLoader
    losses = {c: [e["loss"] for e in rec["epochs"]] for c, rec in runs.items()}
    assert losses["auto"] == losses["identity"] == losses["native"], losses  # exactly: the same batches
    assert [e["test_mrr"] for e in runs["auto"]["epochs"]] == [e["test_mrr"] for e in runs["native"]["epochs"]]
    native = runs["native"]  # DGL's own loader counts no bytes: said so, not a fraction of 1.000
    assert native["final"]["fraction"] is None and all(e["fraction"] is None for e in native["epochs"])
    assert all(e["train_batches"] is None for e in native["epochs"])  # not counted, not 0
    assert all(e["train_batches"] > 0 for e in runs["identity"]["epochs"])
    assert "bytes moved not counted" in r.stdout and "(;" not in r.stdout and "moved 0.0 MB" not in r.stdout
    auto = runs["auto"]
    assert auto["task"] == "link" and auto["framework"] == "dgl"
    assert auto["epochs"][0]["sent_bytes"] < auto["epochs"][0]["raw_bytes"]  # features compressed
    assert auto["epochs"][-1]["loss"] < auto["epochs"][0]["loss"]
    assert auto["final"]["test_mrr"] > 1.5 * auto["final"]["random_mrr"]  # learns (2 tiny epochs)
