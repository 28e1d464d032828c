"""The generated ogbn-mag-like data set: ogbn-mag's types, PyG's reverse edge types, papers = graphgen's nodes,
labels carried by features and by every relation, year split, cache, checks."""
import numpy as np
import pytest
import torch

from ibp_graph.data import graphgen, maggen
from ibp_graph.data.hetero import HeteroPreparedDataset, edge_index, reverse_type
from ibp_graph.data.maggen import MagSpec
from ibp_graph.data.prepared import PreparedDataset

SMALL = MagSpec(num_papers=3000, num_authors=4000, num_institutions=60, num_fields=300, num_classes=20, seed=2)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return HeteroPreparedDataset.load(maggen.generate(SMALL, tmp_path_factory.mktemp("mag") / "m", progress=False),
                                      verify="full")


def test_types_sizes_and_reverse_edge_types(small):
    assert small.name == "synthetic-mag" and small.target == "paper" and small.num_classes == 20
    assert small.num_nodes_dict == {"paper": 3000, "author": 4000, "institution": 60, "field_of_study": 300}
    assert set(small.x_dict) == {"paper"} and small.x.shape == (3000, 128) and small.x.dtype == torch.float32
    forward = list(maggen.EDGE_TYPES)
    assert small.edge_types == forward + [reverse_type(et) for et in forward if et[0] != et[2]]
    for et in forward:
        ei = edge_index(small.relations[et])
        pairs = ei[0] * 10**6 + ei[1]
        assert torch.unique(pairs).numel() == pairs.numel(), et  # no repeated pair
        if et[0] == et[2]:  # cites: undirected, no self-citation
            assert torch.equal(torch.sort(pairs).values, torch.sort(ei[1] * 10**6 + ei[0]).values)
            assert not bool((ei[0] == ei[1]).any())
        else:  # the reverse type holds the same pairs flipped
            rev = edge_index(small.relations[reverse_type(et)])
            assert torch.equal(torch.sort(pairs).values, torch.sort(rev[1] * 10**6 + rev[0]).values), et
    writes = small.relations[("author", "writes", "paper")]
    assert int(np.diff(writes.indptr).min()) >= 1  # every paper has an author
    assert 2.0 < writes.num_edges / 3000 < 3.2  # ~authors_per_paper (fewer after repeats are removed)


def test_papers_are_the_homogeneous_generators_nodes(small, tmp_path):
    homo = PreparedDataset.load(graphgen.generate(SMALL.papers(), tmp_path / "h", store=False, progress=False))
    assert torch.equal(homo.x, small.x)  # bit for bit: the same recipe and streams
    assert torch.equal(homo.y, small.y)  # labeled_fraction=1: every paper labeled, as in ogbn-mag
    for s in ("train", "valid", "test"):
        assert torch.equal(homo.split[s], small.split[s])
    cites = small.relations[("paper", "cites", "paper")]
    assert np.array_equal(cites.indptr, homo.graph.indptr) and np.array_equal(cites.indices, homo.graph.indices)


def test_year_split_and_labels(small):
    sizes = {k: v.numel() for k, v in small.split.items()}
    assert sum(sizes.values()) == 3000 and torch.unique(torch.cat(list(small.split.values()))).numel() == 3000
    assert abs(sizes["train"] / 3000 - 0.78) < 0.05 and abs(sizes["valid"] / 3000 - 0.08) < 0.03
    assert int(small.y.min()) >= 0 and int(small.y.max()) < 20
    assert small.majority_accuracy() < 0.3


def _same_label_share(small, et) -> float:
    """Share of paper pairs linked through one node of type et[0] (or et[2]) that have the same label."""
    rel = small.relations[et]
    ei = edge_index(rel)
    other, paper = (ei[0], ei[1]) if et[2] == "paper" else (ei[1], ei[0])
    y = small.y
    order = torch.argsort(other, stable=True)
    other, paper = other[order], paper[order]
    first = torch.ones_like(other, dtype=torch.bool)
    first[1:] = other[1:] != other[:-1]
    keep = ~first  # consecutive papers of one author / field
    return float((y[paper[1:]][keep[1:]] == y[paper[:-1]][keep[1:]]).double().mean())


def test_labels_are_learnable_from_features_and_from_every_relation(small):
    chance = float((torch.bincount(small.y).double() / 3000).pow(2).sum())  # two random papers agree
    for et in [("author", "writes", "paper"), ("paper", "has_topic", "field_of_study")]:
        assert _same_label_share(small, et) > chance + 0.25, et
    # features: nearest class mean beats the majority class by far
    x, y, tr, te = small.x.double(), small.y, small.split["train"], small.split["test"]
    mu = torch.zeros(20, 128, dtype=torch.float64).index_add_(0, y[tr], x[tr])
    mu /= torch.bincount(y[tr], minlength=20).clamp(min=1)[:, None].double()
    sd = x[tr].std(0)
    pred = torch.cdist(x[te] / sd, mu / sd).argmin(1)
    assert float((pred == y[te]).double().mean()) > 2 * small.majority_accuracy()


def test_store_deterministic_generation_and_cache(small, tmp_path, capsys):
    assert small.store_codec in ("ibp", "ebp") and small.meta["node_types"]["paper"]["store_codec"] == small.store_codec
    assert torch.equal(small.store().decode_rows(torch.arange(3000)), small.x)
    again = HeteroPreparedDataset.load(maggen.generate(SMALL, tmp_path / "again", store=False, progress=False))
    assert not again.has_store()
    for et in small.edge_types:
        assert np.array_equal(again.relations[et].indices, small.relations[et].indices), et
    spec = MagSpec(num_papers=400, num_authors=500, num_institutions=10, num_fields=30, num_classes=5)
    d = maggen.ensure(spec, tmp_path, progress=True)
    assert d == maggen.cache_dir(spec, tmp_path) and "generated" in capsys.readouterr().out
    stamp = (d / "meta.json").stat().st_mtime_ns
    assert maggen.ensure(spec, tmp_path, progress=False) == d and (d / "meta.json").stat().st_mtime_ns == stamp
    nostore = MagSpec(num_papers=400, num_authors=500, num_institutions=10, num_fields=30, num_classes=6)
    d2 = maggen.ensure(nostore, tmp_path, store=False, progress=False)
    assert not HeteroPreparedDataset.load(d2).has_store()
    assert HeteroPreparedDataset.load(maggen.ensure(nostore, tmp_path, progress=False)).store_codec is not None


def test_spec_checks_name_the_field():
    with pytest.raises(ValueError, match=r"MagSpec.authors_per_paper=0.5 is not accepted; expected a number >= 1.0"):
        MagSpec(authors_per_paper=0.5)
    with pytest.raises(ValueError, match="MagSpec.num_classes"):
        MagSpec(num_classes=1)
    assert MagSpec(avg_citations=3) == MagSpec(avg_citations=3.0)


def test_prepare_command_generates_the_configured_mag(tmp_path, capsys):
    from ibp_graph.cli import main as cli

    assert cli(["prepare", "--dataset", "synthetic-mag", "--root", str(tmp_path), "--no-store", "--quiet",
                "--set", "data.mag.num_papers=500", "--set", "data.mag.num_authors=600",
                "--set", "data.mag.num_classes=7"]) == 0
    (d,) = tmp_path.glob("synthetic-mag-500-*")
    ds = HeteroPreparedDataset.load(d)
    assert ds.num_nodes_dict["author"] == 600 and ds.num_classes == 7
    assert cli(["prepare", "--dataset", "synthetic-mag", "--set", "data.mag.papers=1"]) == 1
    assert "unknown key data.mag.papers" in capsys.readouterr().err


@pytest.mark.parametrize("content", ['{"codec": ', '{"codec": 5}'])
def test_adding_stores_names_a_damaged_store_meta_json(tmp_path, content):
    """A store folder left with a damaged meta.json (a copy cut short, an edit) is named, not read blindly."""
    from ibp_graph.cli import main as cli
    from ibp_graph.data.hetero import add_stores

    assert cli(["prepare", "--dataset", "synthetic-mag", "--root", str(tmp_path), "--no-store", "--quiet",
                "--set", "data.mag.num_papers=300", "--set", "data.mag.num_authors=300"]) == 0
    (d,) = tmp_path.glob("synthetic-mag-300-*")
    store = d / "nodes" / "paper" / "store"
    store.mkdir()
    (store / "meta.json").write_text(content)
    with pytest.raises(ValueError, match=r"nodes/paper/store/meta.json"):
        add_stores(d, progress=False)
