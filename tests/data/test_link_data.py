"""Link-prediction folders: the generated citation set, and `ibp-graph prepare --dataset ogbl-citation2` on a
miniature in OGB's raw layout (ogb 1.3.6: raw/edge.csv.gz, node-feat.csv.gz, node_year.csv.gz,
num-node-list.csv.gz, num-edge-list.csv.gz; split/time/{train,valid,test}.pt, torch-saved dicts
{source_node, target_node[, target_node_neg (n, K)]}). When ogb is installed, its own reader checks that
the miniature is read as OGB reads it."""
import json

import numpy as np
import pytest
import torch

from ibp_graph.cli import main as cli
from ibp_graph.data import citegen, ogb_link
from ibp_graph.data.link import LinkPreparedDataset
from ibp_graph.data.ogb import DamagedOGBFileError, MissingOGBFilesError


def _pairs(graph):
    dst = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
    return set(zip(np.asarray(graph.indices).tolist(), dst.tolist()))


@pytest.fixture(scope="module")
def citation(tmp_path_factory):
    spec = citegen.CitationSpec(num_nodes=2000, num_negatives=20, dim=16, eval_fraction=0.2)
    return spec, LinkPreparedDataset.load(citegen.generate(spec, tmp_path_factory.mktemp("c") / "set", progress=False))


def test_generated_citations_split_as_ogbl_citation2(citation):
    spec, ds = citation
    s = ds.split
    n = spec.num_nodes
    assert ds.name == "synthetic-citation" and ds.num_nodes == n and ds.x.shape == (n, 16)
    assert ds.num_negatives == 20 and s["valid"]["target_node_neg"].shape == (s["valid"]["source_node"].numel(), 20)
    for part in ("train", "valid", "test"):  # citations point to earlier papers
        assert bool((s[part]["target_node"] < s[part]["source_node"]).all()), part
    # one valid and one test reference per held-out paper, among the latest eval_fraction of papers
    for part in ("valid", "test"):
        src = s[part]["source_node"]
        assert src.unique().numel() == src.numel() > 0 and int(src.min()) >= n - round(0.2 * n)
    assert torch.equal(s["valid"]["source_node"], s["test"]["source_node"])
    assert bool((s["valid"]["target_node"] != s["test"]["target_node"]).all())
    # the message-passing graph: the training edges both ways, no held-out edge in either direction
    graph = _pairs(ds.graph)
    train = set(zip(s["train"]["source_node"].tolist(), s["train"]["target_node"].tolist()))
    assert graph == train | {(b, a) for a, b in train}
    for part in ("valid", "test"):
        held = set(zip(s[part]["source_node"].tolist(), s[part]["target_node"].tolist()))
        assert not held & graph and not {(b, a) for a, b in held} & graph
    # negatives: uniform over the other nodes, never the edge's source or target
    neg = s["test"]["target_node_neg"]
    assert not bool((neg == s["test"]["source_node"][:, None]).any() | (neg == s["test"]["target_node"][:, None]).any())
    assert neg.unique().numel() > 0.5 * n
    assert ds.has_store() and torch.equal(ds.store().decode_rows(torch.arange(n)), ds.x)


def test_generation_is_repeatable(citation, tmp_path):
    spec, ds = citation
    again = LinkPreparedDataset.load(citegen.generate(spec, tmp_path / "again", store=False, progress=False))
    assert torch.equal(again.x, ds.x) and np.array_equal(again.graph.indices, ds.graph.indices)
    for part, values in ds.split.items():
        for key, v in values.items():
            assert torch.equal(again.split[part][key], v), (part, key)


def test_features_carry_the_citations(citation):
    """Cited papers' features are closer to their citing paper's than random papers' are (the signal a GNN
    with a dot-product decoder learns from)."""
    _, ds = citation
    x = (ds.x - ds.x.mean(0)) / ds.x.std(0)
    t = ds.split["test"]
    pos = (x[t["source_node"]] * x[t["target_node"]]).sum(1)
    neg = (x[t["source_node"]][:, None] * x[t["target_node_neg"]]).sum(2)
    assert float((pos[:, None] > neg).float().mean()) > 0.6  # 0.64 at 16 columns; no signal: 0.5


def test_a_damaged_link_folder_is_named(citation, tmp_path):
    import shutil

    _, ds = citation
    d = tmp_path / "copy"
    shutil.copytree(ds.directory, d)
    np.save(d / "link" / "test_target_node.npy", np.full(ds.split["test"]["target_node"].shape, 10 ** 6))
    with pytest.raises(ValueError, match=r"test_target_node\.npy"):
        LinkPreparedDataset.load(d)  # the checksum differs
    with pytest.raises(ValueError, match=r"test\['target_node'\] names node 1000000, outside \[0, 2000\)"):
        LinkPreparedDataset.load(d, verify="none")  # and the ids are checked regardless


# ---------------------------------------------------------------------------------------------
# ogbl-citation2's raw layout


def write_citation2(root, n=300, e=2400, dim=8, k=30, seed=0):
    """A miniature ogbl-citation2 in OGB's layout; returns its arrays."""
    rng = np.random.default_rng(seed)
    src = rng.integers(1, n, e)
    dst = (rng.random(e) * src).astype(np.int64)
    key = np.unique(src * n + dst)
    src, dst = key // n, key % n
    held = rng.choice(src.shape[0], 80, replace=False)
    train = np.setdiff1d(np.arange(src.shape[0]), held)
    split = {"train": {"source_node": torch.from_numpy(src[train]), "target_node": torch.from_numpy(dst[train])}}
    for part, idx in (("valid", held[:40]), ("test", held[40:])):
        split[part] = {"source_node": torch.from_numpy(src[idx]), "target_node": torch.from_numpy(dst[idx]),
                       "target_node_neg": torch.from_numpy(rng.integers(0, n, (40, k)))}
    x = (rng.standard_normal((n, dim)) * 0.1).astype(np.float32)
    year = rng.integers(1990, 2020, n)
    d = root / "ogbl_citation2"
    (d / "raw").mkdir(parents=True)
    (d / "split" / "time").mkdir(parents=True)
    (d / "RELEASE_v1.txt").write_text("miniature\n")  # else ogb asks whether to download an update
    np.savetxt(d / "raw" / "edge.csv.gz", np.stack([src[train], dst[train]], 1), fmt="%d", delimiter=",")
    np.savetxt(d / "raw" / "node-feat.csv.gz", x, fmt="%.9g", delimiter=",")
    np.savetxt(d / "raw" / "node_year.csv.gz", year.reshape(-1, 1), fmt="%d")
    np.savetxt(d / "raw" / "num-node-list.csv.gz", [n], fmt="%d")
    np.savetxt(d / "raw" / "num-edge-list.csv.gz", [train.shape[0]], fmt="%d")
    for part, values in split.items():
        torch.save(values, d / "split" / "time" / f"{part}.pt")
    return d, split, x, year


def _check(out, split, x, year, undirected=True):
    ds = LinkPreparedDataset.load(out)
    assert ds.name == "ogbl-citation2" and torch.equal(ds.x, torch.from_numpy(x))
    assert torch.equal(ds.year, torch.from_numpy(year))
    for part, values in split.items():
        for key, v in values.items():
            assert torch.equal(ds.split[part][key], v), (part, key)
    train = set(zip(split["train"]["source_node"].tolist(), split["train"]["target_node"].tolist()))
    assert _pairs(ds.graph) == (train | {(b, a) for a, b in train} if undirected else train)
    return ds


def test_ogbl_citation2_layout_through_the_cli(tmp_path):
    d, split, x, year = write_citation2(tmp_path)
    out = tmp_path / "prepared"
    assert cli(["prepare", "--dataset", "ogbl-citation2", "--root", str(tmp_path), "--out", str(out), "--quiet"]) == 0
    ds = _check(out, split, x, year)
    assert ds.num_negatives == 30 and ds.has_store() and ds.meta["heldout_edges_removed"] == 0


def test_held_out_edges_are_removed_from_the_graph_and_directed_keeps_directions(tmp_path):
    d, split, x, year = write_citation2(tmp_path)
    edges = np.loadtxt(d / "raw" / "edge.csv.gz", delimiter=",", dtype=np.int64)
    held = np.stack([split["valid"]["source_node"].numpy(), split["valid"]["target_node"].numpy()], 1)[:7]
    np.savetxt(d / "raw" / "edge.csv.gz", np.concatenate([edges, held]), fmt="%d", delimiter=",")
    np.savetxt(d / "raw" / "num-edge-list.csv.gz", [edges.shape[0] + 7], fmt="%d")
    out = ogb_link.prepare(tmp_path, undirected=False, store=False, progress=False, chunk_rows=101)
    assert out == d / "ibp_prepared"
    ds = _check(out, split, x, year, undirected=False)
    assert ds.meta["heldout_edges_removed"] == 7 and not ds.has_store()


def test_ogbs_own_reader_reads_the_miniature_alike(tmp_path):
    pytest.importorskip("ogb")
    from ogb.linkproppred import LinkPropPredDataset

    d, split, x, year = write_citation2(tmp_path)
    (d / "processed").mkdir()  # where ogb saves its parsed graph (the zip has it)
    theirs = LinkPropPredDataset("ogbl-citation2", root=str(tmp_path))
    ours = LinkPreparedDataset.load(ogb_link.prepare(tmp_path, tmp_path / "ours", undirected=False, progress=False))
    assert np.array_equal(theirs[0]["node_feat"], ours.x.numpy())
    assert np.array_equal(theirs[0]["node_year"][:, 0], ours.year.numpy())
    assert _pairs(ours.graph) == set(map(tuple, theirs[0]["edge_index"].T.tolist()))
    for part, values in theirs.get_edge_split().items():
        for key, v in values.items():
            assert torch.equal(ours.split[part][key], v), (part, key)


def _rewrite(d, part, **values):
    path = d / "split" / "time" / f"{part}.pt"
    saved = torch.load(path)
    saved.update(values)
    for k in [k for k, v in values.items() if v is None]:
        del saved[k]
    torch.save(saved, path)


@pytest.mark.parametrize("damage, message", [
    (lambda d, s: _rewrite(d, "valid", target_node_neg=None),
     r"valid\.pt is damaged: valid\['target_node_neg'\] is NoneType; expected a tensor of node ids"),
    (lambda d, s: _rewrite(d, "test", source_node=torch.full((40,), 300)),
     r"test\.pt is damaged: test\['source_node'\] names node 300, outside \[0, 300\)"),
    (lambda d, s: _rewrite(d, "test", target_node=torch.zeros(39, dtype=torch.int64)),
     r"test\.pt is damaged: test\['target_node'\] has 39 rows and test\['source_node'\] 40"),
    (lambda d, s: _rewrite(d, "train", source_node=torch.zeros(5)),
     r"train\.pt is damaged: train\['source_node'\] is float32 of shape \(5,\); expected integer node ids"),
    (lambda d, s: _rewrite(d, "test", target_node_neg=torch.zeros(40, 7, dtype=torch.int64)),
     r"test\['target_node_neg'\] has 7 candidates per edge; expected 30 \(as valid has\)"),
    (lambda d, s: torch.save([1, 2], d / "split" / "time" / "train.pt"),
     r"train\.pt is damaged: it holds a list; expected a dict of tensors"),
    (lambda d, s: torch.save({"source_node": np.arange(3)}, d / "split" / "time" / "train.pt"),
     r"train\.pt is damaged: not a torch-saved dict of tensors"),
    (lambda d, s: (d / "split" / "time" / "valid.pt").write_bytes(b"not a zip"),
     r"valid\.pt is damaged: not a torch-saved dict of tensors"),
    (lambda d, s: np.savetxt(d / "raw" / "edge.csv.gz", [[5, 0], [300, 1]], fmt="%d", delimiter=","),
     r"edge\.csv\.gz is damaged: an edge names source node 300, outside \[0, 300\)"),
    (lambda d, s: np.savetxt(d / "raw" / "num-edge-list.csv.gz", [5], fmt="%d"),
     r"edge\.csv\.gz is damaged: it lists \d+ edges; num-edge-list\.csv\.gz counts 5"),
    (lambda d, s: np.savetxt(d / "raw" / "node_year.csv.gz", np.zeros((299, 1)), fmt="%d"),
     r"node_year\.csv\.gz is damaged: it holds \(299, 1\) values; expected one year per node \(300 lines"),
    (lambda d, s: np.savetxt(d / "raw" / "node-feat.csv.gz", np.zeros((299, 8)), fmt="%d", delimiter=","),
     r"node-feat\.csv\.gz: the feature file has 299 rows; the graph has 300 nodes"),
])
def test_malformed_files_are_named_with_what_was_expected(tmp_path, damage, message):
    d, split, x, year = write_citation2(tmp_path)
    damage(d, split)
    with pytest.raises(ValueError, match=message):
        ogb_link.prepare(tmp_path, progress=False)
    assert not (d / "ibp_prepared").exists()


def test_missing_files_are_listed_with_where_ogb_publishes_them(tmp_path):
    d, *_ = write_citation2(tmp_path)
    (d / "raw" / "node_year.csv.gz").unlink()
    (d / "split" / "time" / "test.pt").unlink()
    with pytest.raises(MissingOGBFilesError) as e:
        ogb_link.prepare(tmp_path, progress=False)
    text = str(e.value)
    assert "2 raw file(s) missing" in text and "node_year.csv.gz" in text and "split/time/test.pt" in text
    assert ogb_link.URL in text
    assert isinstance(DamagedOGBFileError(d, "x"), ValueError)
    assert json.loads(json.dumps(ogb_link.required_files()))[-1] == "split/time/test.pt"


def test_verify_checks_a_link_folder_and_its_store(citation, capsys):
    _, ds = citation
    assert cli(["verify", str(ds.directory)]) == 0
    out = capsys.readouterr().out
    assert f"{ds.directory} (link): ok" in out and "(store): ok" in out
