"""The default data set generator: the embedding family bit for bit, graph shape, labels, splits, store."""
import numpy as np
import pytest
import torch

from ibp_graph.data import graphgen
from ibp_graph.data.graphgen import GraphSpec, embedding_rows
from ibp_graph.data.prepared import PreparedDataset
from ibp_graph.data.synthetic import CHUNK_ROWS, averaged_embeddings

SMALL = GraphSpec(num_nodes=3000, avg_citations=8.0, labeled_fraction=0.5, seed=3)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return PreparedDataset.load(graphgen.generate(SMALL, tmp_path_factory.mktemp("gg") / "small", progress=False))


def test_embedding_rows_are_the_synthetic_family_bit_for_bit():
    n = CHUNK_ROWS + 300
    labels = np.random.default_rng(0).integers(0, 172, n)
    whole = averaged_embeddings(n, labels=labels, seed=5).numpy()
    out = np.empty((n, 128), dtype=np.float32)
    embedding_rows(out[:CHUNK_ROWS], 0, labels[:CHUNK_ROWS], seed=5, topic_fraction=0.2, num_classes=172)
    embedding_rows(out[CHUNK_ROWS:], CHUNK_ROWS, labels[CHUNK_ROWS:], seed=5, topic_fraction=0.2, num_classes=172)
    assert np.array_equal(out.view(np.uint32), whole.view(np.uint32))
    with pytest.raises(ValueError, match="multiple of CHUNK_ROWS"):
        embedding_rows(out[:10], 5, labels[:10], seed=5, topic_fraction=0.2, num_classes=172)


def test_graph_is_undirected_power_law_and_homophilous(small):
    g = small.graph
    n = g.num_nodes
    col = np.repeat(np.arange(n), np.diff(g.indptr))
    src = np.asarray(g.indices)
    assert not np.any(src == col)  # no self-citations
    pairs = src * n + col
    assert np.unique(pairs).size == pairs.size  # no duplicate edges
    assert np.array_equal(np.sort(pairs), np.sort(col * n + src))  # every edge in both directions
    deg = g.in_degree()
    assert 10 < deg.mean() < 22 and deg.max() > 8 * deg.mean()  # a heavy tail: hubs
    y = small.y.numpy()
    both = (y[src] >= 0) & (y[col] >= 0)
    assert (y[src][both] == y[col][both]).mean() > 0.5  # most citations stay within a subject


def test_labels_splits_and_features(small):
    y = small.y
    assert y.dtype == torch.int64 and int(y.min()) == -1 and int(y.max()) < 172
    labeled = int((y >= 0).sum())
    assert abs(labeled / small.num_nodes - 0.5) < 0.05
    sizes = {k: v.numel() for k, v in small.split.items()}
    assert sum(sizes.values()) == labeled  # every labeled node in exactly one split
    assert torch.unique(torch.cat(list(small.split.values()))).numel() == labeled
    assert abs(sizes["train"] / labeled - 0.78) < 0.05 and abs(sizes["test"] / labeled - 0.14) < 0.05
    for idx in small.split.values():
        assert bool((y[idx] >= 0).all())
    assert small.majority_accuracy() < 0.15
    assert small.x.shape == (3000, 128) and small.x.dtype == torch.float32
    # features carry the class: nearest class mean beats the majority class by far
    x, tr, te = small.x.double(), small.split["train"], small.split["test"]
    mu = torch.zeros(172, 128, dtype=torch.float64).index_add_(0, y[tr], x[tr])
    mu /= torch.bincount(y[tr], minlength=172).clamp(min=1)[:, None].double()
    sd = x[tr].std(0)
    pred = torch.cdist(x[te] / sd, mu / sd).argmin(1)
    assert float((pred == y[te]).double().mean()) > 3 * small.majority_accuracy()


def test_store_is_lossless_and_generation_is_deterministic(small, tmp_path):
    store = small.store()
    assert torch.equal(store.decode_rows(torch.arange(small.num_nodes)), small.x)
    assert small.meta["store_fraction"] == pytest.approx(store.fraction)
    again = PreparedDataset.load(graphgen.generate(SMALL, tmp_path / "again", store=False, progress=False))
    assert torch.equal(again.x, small.x) and torch.equal(again.y, small.y)
    assert np.array_equal(again.graph.indices, small.graph.indices)
    other = graphgen.generate(GraphSpec(num_nodes=3000, avg_citations=8.0, labeled_fraction=0.5, seed=4),
                              tmp_path / "other", store=False, progress=False)
    assert not torch.equal(PreparedDataset.load(other).x, small.x)


def test_ensure_caches_by_spec(tmp_path, capsys):
    spec = GraphSpec(num_nodes=500, avg_citations=3.0)
    d = graphgen.ensure(spec, tmp_path, progress=True)
    assert d == graphgen.cache_dir(spec, tmp_path) and PreparedDataset.is_complete(d)
    assert "generated" in capsys.readouterr().out
    stamp = (d / "meta.json").stat().st_mtime_ns
    assert graphgen.ensure(spec, tmp_path) == d and (d / "meta.json").stat().st_mtime_ns == stamp
    assert graphgen.cache_dir(GraphSpec(num_nodes=500, avg_citations=4.0), tmp_path) != d


def test_spec_checks_and_papers100m_size():
    with pytest.raises(ValueError, match="homophily"):
        GraphSpec(homophily=1.5)
    with pytest.raises(ValueError, match="num_nodes"):
        GraphSpec(num_nodes=1)
    big = GraphSpec.papers100m()
    assert big.num_nodes == 111_059_956 and big.labeled_fraction < 0.02


def test_parallel_feature_writers_match_the_whole_table(tmp_path):
    """The path that writes 100 M-row tables (processes writing parts of one memory map) gives the same bits."""
    spec = GraphSpec(num_nodes=CHUNK_ROWS + 100, seed=1)
    classes = np.random.default_rng(0).integers(0, 172, spec.num_nodes).astype(np.int16)
    graphgen._write_features(tmp_path / "x.npy", classes, spec, progress=False, workers=2, step=CHUNK_ROWS)
    got = np.load(tmp_path / "x.npy")
    whole = averaged_embeddings(spec.num_nodes, labels=classes, seed=1).numpy()
    assert np.array_equal(got.view(np.uint32), whole.view(np.uint32))


def test_prepare_command_generates_the_configured_size(tmp_path, capsys):
    from ibp_graph.cli import main as cli

    assert cli(["prepare", "--dataset", "synthetic", "--root", str(tmp_path),
                "--set", "data.synthetic.num_nodes=700", "--set", "data.synthetic.avg_citations=2"]) == 0
    (d,) = tmp_path.glob("synthetic-700-*")
    assert PreparedDataset.load(d).num_nodes == 700 and "generated" in capsys.readouterr().out
    assert cli(["prepare", "--dataset", "synthetic", "--set", "data.synthetic.bogus=1"]) == 1
    assert "unknown key data.synthetic.bogus" in capsys.readouterr().err
