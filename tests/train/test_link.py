"""Link prediction (`task: link`): OGB's ranking, the config's keys, the PyG loader factory's call, and the
training loop end to end, on CompressedLinkNeighborLoader (training) and CompressedNeighborLoader
(embeddings for the evaluation), with torch's default CPU threads: a run is bit-reproducible.
"""
import json

import pytest
import torch

from ibp_graph.data import citegen
from ibp_graph.data.link import LinkPreparedDataset
from ibp_graph.train.config import ConfigError, load_config
from ibp_graph.train import loop
from ibp_graph.train.link import ogb_ranks, random_mrr, rank_metrics, run_link
from ibp_graph.train.link_frontends import LinkPyG, train_edge_ids
from tests.train import tiny

TINY = ["task=link", "data.name=synthetic-citation", "data.citation.num_nodes=3000",
        "data.citation.num_negatives=50", "data.citation.dim=32", "data.citation.eval_fraction=0.15",
        "loader.batch_size=512", "loader.eval_batch_size=1024", "loader.num_workers=0", "model.hidden=64",
        "model.dropout=0", "train.lr=0.01", "output.progress=false", "loader.device=cpu"]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tiny.generated_root(tmp_path_factory, TINY, lambda data, root: citegen.ensure(data.citation, root, progress=False))


def _cfg(data_root, out, *extra):
    return tiny.config(TINY, data_root, out, *extra)


# ---------------------------------------------------------------------------------------------
# OGB's ranking


def test_ranks_average_the_optimistic_and_pessimistic_ranks_on_ties():
    pos = torch.tensor([1.0, 1.0, 5.0, 0.0])
    neg = torch.tensor([[0.0, 2.0, 1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    assert ogb_ranks(pos, neg).tolist() == [2.5, 2.5, 1.0, 4.0]  # a tie with one or all three: (0 + 3) / 2 + 1
    sums = rank_metrics(ogb_ranks(pos, neg), [1, 3])
    assert sums == {"mrr": pytest.approx(2 / 2.5 + 1 + 1 / 4), "count": 4.0, "hits@1": 1.0, "hits@3": 3.0}
    with pytest.raises(ValueError, match=r"expected \(n,\) and \(n, K\)"):
        ogb_ranks(pos, neg[:3])


def test_metrics_equal_ogbs_citation2_evaluator():
    ogb = pytest.importorskip("ogb.linkproppred")
    g = torch.Generator().manual_seed(0)
    pos = torch.randint(0, 6, (300,), generator=g).float()  # few distinct scores: many ties
    neg = torch.randint(0, 6, (300, 40), generator=g).float()
    want = ogb.Evaluator("ogbl-citation2").eval({"y_pred_pos": pos, "y_pred_neg": neg})
    got = rank_metrics(ogb_ranks(pos, neg), [1, 3, 10])
    assert got["mrr"] / got["count"] == pytest.approx(float(want["mrr_list"].mean()), rel=1e-6)
    for k in (1, 3, 10):
        assert got[f"hits@{k}"] / got["count"] == pytest.approx(float(want[f"hits@{k}_list"].mean()))


def test_random_mrr_is_a_random_rankers_expectation():
    g = torch.Generator().manual_seed(1)
    ranks = ogb_ranks(torch.rand(20000, generator=g), torch.rand(20000, 9, generator=g))
    assert random_mrr(9) == pytest.approx(sum(1 / r for r in range(1, 11)) / 10)
    assert float((1 / ranks).mean()) == pytest.approx(random_mrr(9), abs=0.01)


# ---------------------------------------------------------------------------------------------
# the config


@pytest.mark.parametrize("override, message", [
    (["task=link", "data.name=synthetic"], "data.name='synthetic' is not accepted with task='link'"),
    (["data.name=synthetic-citation"], "is a link-prediction data set; expected task='link'"),
    (TINY + ["model.arch=gcn"], "model.arch='gcn' is not accepted with task='link'"),
    (TINY + ["link.decoder=cosine"], "link.decoder='cosine' is not accepted; choose from ['dot', 'mlp']"),
    (TINY + ["link.neg_sampling_ratio=0"], "link.neg_sampling_ratio=0.0 is not accepted; expected a value in (0.0, 1000.0]"),
    (TINY + ["link.hits_k=[1, 0]"], r"link.hits_k[1]=0 is not accepted"),
    (TINY + ["link.hits_k=[3, 3]"], "expected distinct values"),
    (TINY + ["link.max_eval_edges=0"], "link.max_eval_edges=0 is not accepted"),
    (TINY + ["link.negatives=5"], "unknown key link.negatives in link; valid keys: decoder, neg_sampling_ratio"),
    (TINY + ["data.citation.num_nodes=2"], "data.citation.num_nodes=2 is not accepted"),
    (TINY + ["data.citation.homophily=2"], "data.citation.homophily=2.0 is not accepted; expected a value in [0.0, 1.0]"),
    (TINY + ["task=edges"], "task='edges' is not accepted; choose from ['node', 'link']"),
])
def test_link_keys_are_checked(override, message, tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(None, [f"data.root={tmp_path}"] + override)
    assert message in str(e.value), str(e.value)
    assert not any(tmp_path.iterdir())  # refused before anything is generated


def test_the_shipped_link_config_is_the_built_in_set():
    from pathlib import Path

    cfg = load_config(Path(__file__).resolve().parents[2] / "configs" / "link.yaml")
    assert cfg.task == "link" and cfg.data.name == "synthetic-citation" and cfg.link.decoder == "dot"


# ---------------------------------------------------------------------------------------------
# the loader factories


def test_the_pyg_factory_calls_compressed_link_neighbor_loader_with_pygs_arguments(data_root, monkeypatch):
    import ibp_graph.loaders.pyg as pyg_loaders

    calls = []

    def record(*args, **kwargs):  # stands in for the class to come: records the call it gets
        calls.append((args, kwargs))
        return "loader"

    monkeypatch.setattr(pyg_loaders, "CompressedLinkNeighborLoader", record, raising=False)
    cfg = _cfg(data_root, "unused", "link.neg_sampling_ratio=2", "loader.num_neighbors=[4, 3]")
    ds = LinkPreparedDataset.load(citegen.cache_dir(cfg.data.citation, data_root))
    assert LinkPyG().make_train_loader(ds, None, cfg, "auto", device=torch.device("cpu"), rank=1,
                                       world_size=2) == "loader"
    (args, kw), = calls
    (features, graph), fanout = args
    assert graph is ds.graph and features["x"] is ds.store() and fanout == [4, 3]
    train = ds.split["train"]
    assert torch.equal(kw.pop("edge_label_index"), torch.stack([train["source_node"], train["target_node"]]))
    assert kw == dict(edge_label=None, neg_sampling="binary", neg_sampling_ratio=2.0, batch_size=512, shuffle=True,
                      codec="auto", device=torch.device("cpu"), prefetch=2, num_workers=0, persistent_workers=False,
                      rank=1, world_size=2, edge_ids=False)  # the model reads no e_id: the sampler skips them
    LinkPyG().make_train_loader(ds, None, cfg, "identity", device=torch.device("cpu"))
    assert calls[-1][0][0][0]["x"] is ds.x  # other codecs encode the raw table


def test_train_edge_ids_are_the_training_edges_positions_in_the_csc(data_root):
    cfg = _cfg(data_root, "unused")
    ds = LinkPreparedDataset.load(citegen.cache_dir(cfg.data.citation, data_root))
    ids = train_edge_ids(ds.graph, ds.split["train"])
    dst = torch.repeat_interleave(torch.arange(ds.num_nodes), torch.from_numpy(ds.graph.indptr).diff())
    src = torch.from_numpy(ds.graph.indices.astype("int64"))
    assert torch.equal(src[ids], ds.split["train"]["source_node"])
    assert torch.equal(dst[ids], ds.split["train"]["target_node"])
    bad = {"source_node": torch.tensor([5]), "target_node": torch.tensor([ds.split["valid"]["target_node"][0]])}
    bad["source_node"][0] = ds.split["valid"]["source_node"][0]  # a held-out edge: not in the graph
    with pytest.raises(ValueError, match="is not in the prepared graph"):
        train_edge_ids(ds.graph, bad)


# ---------------------------------------------------------------------------------------------
# the loop


def _run(cfg):
    """`ibp-graph train`'s link run."""
    return run_link(cfg, setup=loop.setup_distributed, write=loop._write)


def test_the_loop_learns_and_auto_and_identity_rank_identically(data_root, tmp_path, capsys):
    cfg = _cfg(data_root, tmp_path / "runs", "loader.codecs=[auto, identity]", "train.epochs=3", "name=tiny-link")
    auto, ident = _run(cfg)
    out = capsys.readouterr().out
    assert out.count("epoch  3/3") == 2 and "test MRR" in out and "random ranker" in out
    for a, b in zip(auto["epochs"], ident["epochs"]):  # lossless features, same seeds: the same numbers
        assert a["loss"] == b["loss"] and a["valid_mrr"] == b["valid_mrr"] and a["test_hits@10"] == b["test_hits@10"]
        assert a["raw_bytes"] == b["raw_bytes"] > 0 and b["sent_bytes"] == b["raw_bytes"] > a["sent_bytes"]
    (again,) = _run(_cfg(data_root, tmp_path / "again", "train.epochs=3", "name=tiny-link"))
    assert [e["loss"] for e in again["epochs"]] == [e["loss"] for e in auto["epochs"]]  # reproducible, any threads
    final = auto["final"]
    assert final["random_mrr"] == pytest.approx(random_mrr(50))
    assert final["test_mrr"] > 4 * final["random_mrr"], final  # learnable: well above a random ranker
    assert 0 <= final["test_hits@1"] <= final["test_hits@3"] <= final["test_hits@10"] <= 1
    assert auto["epochs"][-1]["loss"] < auto["epochs"][0]["loss"]
    files = sorted((tmp_path / "runs").glob("tiny-link-*.json"))
    saved = json.loads(files[0].read_text())
    assert saved["task"] == "link" and saved["codec"] == "auto" and saved["config"]["link"]["decoder"] == "dot"


def test_mlp_decoder_and_capped_evaluation(data_root, tmp_path):
    cfg = _cfg(data_root, tmp_path, "link.decoder=mlp", "train.epochs=1", "train.max_batches=2",
               "link.max_eval_edges=40", "link.hits_k=[5]", "link.neg_sampling_ratio=3")
    (result,) = _run(cfg)
    rec = result["epochs"][0]
    assert rec["train_batches"] == 2 and rec["train_pairs"] == 2 * 512 * 4
    assert set(k for k in rec if k.startswith("test_")) == {"test_mrr", "test_hits@5"}
    assert result["decoder"] == "mlp"


def test_train_dispatches_task_link(data_root, tmp_path, monkeypatch):
    import ibp_graph.train.link as link

    seen = []
    monkeypatch.setattr(link, "run_link", lambda cfg, baseline, setup, write, shards:
                        seen.append((cfg.task, baseline, shards)) or [])
    assert loop.run(_cfg(data_root, tmp_path), baseline=True) == [] and seen == [("link", True, loop.open_shards)]


def test_a_prepared_folder_of_another_data_set_is_refused_naming_both(data_root, tmp_path, capsys):
    """data.prepared pointing at another data set's folder (the generated one, asked for as ogbl-citation2) trained
    on it silently."""
    d = citegen.cache_dir(_cfg(data_root, "unused").data.citation, data_root)
    cfg = _cfg(data_root, tmp_path, "data.name=ogbl-citation2", f"data.prepared={d}", "train.epochs=1",
               "train.max_batches=1")
    assert loop.main_config(cfg) == 2
    err = capsys.readouterr().err
    assert f"data.prepared={str(d)!r}" in err and "'synthetic-citation'" in err and "data.name='ogbl-citation2'" in err
    assert not list(tmp_path.glob("*.json"))


def test_the_report_reads_link_runs_and_compares_their_codecs(data_root, tmp_path, capsys):
    """`ibp-graph report runs/` called the run files of `task: link` malformed (no final.majority_test_acc) and
    left them out."""
    from ibp_graph.train.report import load_runs, table

    _run(_cfg(data_root, tmp_path, "loader.codecs=[auto, identity]", "train.epochs=1", "train.max_batches=1",
              "link.max_eval_edges=40", "name=tiny-link"))
    capsys.readouterr()
    runs = load_runs([str(tmp_path)])
    assert "skipping" not in capsys.readouterr().err
    assert sorted(r["codec"] for r in runs) == ["auto", "identity"]
    text = table(runs)
    assert "codecs vs identity" in text and f"{runs[0]['final']['test_mrr']:.4f}" in text
