"""Heterogeneous training (configs/mag.yaml): HeteroSAGE on HeteroData batches; auto and identity train
identically; ogbn-mag from OGB's raw layout; MAG240M's config validates; hetero-only config checks."""
import json
from pathlib import Path

import pytest
import torch

from ibp_graph.data import maggen
from ibp_graph.data.hetero import HeteroPreparedDataset
from ibp_graph.train.config import ConfigError, load_config
from ibp_graph.train.loop import main_config, run
from ibp_graph.train.models import HeteroSAGE

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TINY = ["data.mag.num_papers=1500", "data.mag.num_authors=2000", "data.mag.num_institutions=40",
        "data.mag.num_fields=200", "data.mag.num_classes=12", "loader.batch_size=256", "loader.eval_batch_size=512",
        "loader.num_workers=0", "model.hidden=32", "output.progress=false", "loader.device=cpu"]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("magdata")
    cfg = load_config(CONFIGS / "mag.yaml", TINY + [f"data.root={root}"])
    maggen.ensure(cfg.data.mag, root, progress=False)
    return root


def _cfg(data_root, out, *extra):
    return load_config(CONFIGS / "mag.yaml", TINY + [f"data.root={data_root}", f"output.dir={out}", *extra])


def test_auto_and_identity_train_identically_and_learn(data_root, tmp_path, capsys):
    cfg = _cfg(data_root, tmp_path / "runs", "loader.codecs=[auto, identity]", "train.epochs=3", "name=tinymag")
    auto, ident = run(cfg)
    out = capsys.readouterr().out
    assert out.count("epoch  1/3") == 2 and out.count("epoch  3/3") == 2 and "test accuracy" in out
    assert "synthetic-mag: 3,740 nodes" in out and "paper.x@store" in out
    for a, b in zip(auto["epochs"], ident["epochs"]):  # lossless features, same seeds: the same numbers
        assert a["loss"] == b["loss"] and a["test_acc"] == b["test_acc"] and a["train_acc"] == b["train_acc"]
        assert a["raw_bytes"] == b["raw_bytes"] and b["sent_bytes"] == b["raw_bytes"]
        assert a["sent_bytes"] < a["raw_bytes"]
    assert [f"{e['loss']:.4f}" for e in auto["epochs"]] == [f"{e['loss']:.4f}" for e in ident["epochs"]]
    assert auto["features"] == "store" and ident["features"] == "table"
    assert set(ident["group_codecs"].values()) == {"identity"}
    ds = HeteroPreparedDataset.load(maggen.cache_dir(cfg.data.mag, data_root))
    assert auto["group_codecs"]["paper.x@store"] == ds.store_codec
    assert auto["dataset"] == "synthetic-mag" and auto["num_edges"] == ds.num_edges
    final = auto["final"]
    assert final["test_acc"] > final["majority_test_acc"] + 0.1  # ~0.3 vs ~0.12 after 3 tiny epochs
    files = sorted((tmp_path / "runs").glob("tinymag-*.json"))
    assert [json.loads(f.read_text())["codec"] for f in files] == ["auto", "identity"]
    assert json.loads(files[0].read_text())["config"]["data"]["mag"]["num_papers"] == 1500


def test_per_batch_encoding_without_the_store(data_root, tmp_path):
    (result,) = run(_cfg(data_root, tmp_path, "data.store=false", "train.max_batches=2", "loader.codecs=[ibp]"))
    assert result["features"] == "table" and result["epochs"][0]["train_batches"] == 2
    assert result["final"]["fraction"] < 1.0 and set(result["group_codecs"].values()) == {"ibp"}


def test_hetero_sage_returns_the_seeds_logits_and_reads_every_edge_type():
    torch.manual_seed(0)
    types = ["paper", "author"]
    edges = [("author", "writes", "paper"), ("paper", "rev_writes", "author"), ("paper", "cites", "paper")]
    model = HeteroSAGE(types, edges, {"paper": 4}, 8, 3, 2, "paper", dropout=0.0).eval()
    x = {"paper": torch.randn(5, 4)}
    ei = {edges[0]: torch.tensor([[0, 1], [0, 0]]), edges[1]: torch.tensor([[2], [1]]),
          edges[2]: torch.tensor([[3, 4], [0, 1]])}
    out = model(x, ei, {"paper": 5, "author": 2}, 2)
    assert out.shape == (2, 3)
    torch.testing.assert_close(model(x, ei, {"paper": 5, "author": 2}, 5)[:2], out)  # seeds first
    # an author message reaches paper 0: changing the authors' edges changes its logits
    other = {**ei, edges[0]: torch.tensor([[0], [1]])}
    assert not torch.allclose(model(x, other, {"paper": 5, "author": 2}, 2)[0], out[0])
    with pytest.raises(ValueError, match="target='author' has no features"):
        HeteroSAGE(types, edges, {"paper": 4}, 8, 3, 2, "author")


def test_trimming_layers_does_not_change_the_seeds_logits(data_root):
    from ibp_graph.train import frontends
    from ibp_graph.train.loop import make_loader

    cfg = _cfg(data_root, "unused", "loader.num_neighbors=[4, 3, 2]")
    ds = HeteroPreparedDataset.load(maggen.cache_dir(cfg.data.mag, data_root))
    front = frontends.get("pyg", hetero=True)
    loader = make_loader(ds, ds.split["train"], cfg.loader, "ibp", batch_size=64, shuffle=False,
                         device=torch.device("cpu"))
    batch = next(iter(loader))
    assert all(len(batch[e].num_sampled_edges) == 3 for e in batch.edge_types)  # so forward trims
    model = front.build_model(cfg, ds).eval()
    labels = ds.y[ds.split["train"]]
    trimmed, y = front.forward(model, batch, labels)
    nodes = {t: batch[t].num_nodes for t in batch.node_types}
    full = model(batch.x_dict, batch.edge_index_dict, nodes, 64)
    assert trimmed.shape == (64, 12) and torch.equal(y, labels[:64])
    torch.testing.assert_close(trimmed, full, rtol=1e-4, atol=1e-5)
    assert torch.equal(batch["paper"].x, ds.x[batch["paper"].n_id])  # the rows, bit for bit


def test_ogbn_mag_trains_from_a_miniature_of_ogbs_raw_layout(tmp_path, capsys):
    from tests.data.test_ogb_mag import write_mag

    write_mag(tmp_path / "ogb")
    cfg = load_config(CONFIGS / "mag.yaml", TINY + ["data.name=ogbn-mag", f"data.root={tmp_path / 'ogb'}",
                                                    f"output.dir={tmp_path / 'runs'}", "train.epochs=1"])
    (result,) = run(cfg)
    assert result["dataset"] == "ogbn-mag" and result["epochs"][0]["train_seeds"] == 180
    assert (tmp_path / "ogb" / "ogbn_mag" / "ibp_prepared" / "meta.json").is_file()
    assert "ogbn-mag: 602 nodes" in capsys.readouterr().out


@pytest.mark.parametrize("override, message", [
    ("loader.framework=dgl", "loader.framework='dgl' is not accepted with data.name='synthetic-mag'"),
    ("model.arch=gat", "model.arch='gat' is not accepted with data.name='synthetic-mag'"),
    ("model.norm=layer_norm", "model.norm='layer_norm' is not accepted with data.name='synthetic-mag'"),
    ("data.mag.num_paper=5", "unknown key data.mag.num_paper"),
    ("data.mag.homophily=2", "data.mag.homophily=2.0 is not accepted; expected a value in [0.0, 1.0]"),
])
def test_heterogeneous_config_mistakes_are_refused(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_config(CONFIGS / "mag.yaml", [override])


def test_mag240m_config_trains_from_a_miniature_of_ogb_lscs_layout(tmp_path, capsys):
    from tests.data.test_ogb_mag import write_mag240m

    sets = [f"data.root={tmp_path}", f"output.dir={tmp_path / 'runs'}", "loader.device=cpu", "loader.num_workers=0",
            "model.hidden=16", "loader.batch_size=64", "train.epochs=1", "output.progress=false"]
    cfg = load_config(CONFIGS / "mag240m.yaml", sets)
    assert cfg.data.name == "mag240m" and cfg.model.arch == "sage"
    assert main_config(cfg) == 1  # nothing there yet: the files are named with OGB-LSC's URL
    err = capsys.readouterr().err
    assert "mag240m_kddcup2021/processed/paper/node_feat.npy" in err and "mag240m_kddcup2021.zip" in err
    write_mag240m(tmp_path)
    (result,) = run(cfg)
    assert result["dataset"] == "mag240m" and result["epochs"][0]["train_seeds"] == 190
    assert result["final"]["test_acc"] is None  # MAG240M's test labels are hidden: an empty test split
    assert result["epochs"][0]["valid_acc"] is not None
