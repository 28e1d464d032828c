"""`ibp-graph prepare --dataset ogbn-mag` on a miniature in OGB's raw ogbn-mag layout (the files of mag.zip).

The layout follows ogb's read_csv_heterograph_raw / read_node_label_hetero /
read_nodesplitidx_split_hetero and PyG's OGB_MAG: ``raw/num-node-dict.csv.gz`` (a
header of node types, one row of counts), ``raw/node-feat/paper/node-feat.csv.gz``,
``raw/node-label/paper/node-label.csv.gz``, ``raw/relations/<src>___<rel>___<dst>/edge.csv.gz``
and ``split/time/paper/{train,valid,test}.csv.gz``. The prepared folder must hold what
PyG's ``OGB_MAG(transform=ToUndirected())`` holds.
"""
import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from ibp_graph.cli import main as cli
from ibp_graph.data import ogb_mag
from ibp_graph.data.checksums import ChecksumError
from ibp_graph.data.hetero import HeteroPreparedDataset, edge_index
from ibp_graph.data.maggen import EDGE_TYPES
from ibp_graph.data.ogb import DamagedOGBFileError, MissingOGBFilesError

COUNTS = {"author": 300, "field_of_study": 40, "institution": 12, "paper": 250}


def write_mag(root: Path, seed: int = 0, dim: int = 8) -> dict:
    """A miniature ogbn-mag under root/ogbn_mag; returns what it wrote."""
    rng = np.random.default_rng(seed)
    d = root / "ogbn_mag"
    raw = d / "raw"
    (raw / "node-feat" / "paper").mkdir(parents=True)
    (raw / "node-label" / "paper").mkdir(parents=True)
    with gzip.open(raw / "num-node-dict.csv.gz", "wt") as f:  # OGB's column order
        f.write(",".join(COUNTS) + "\n" + ",".join(str(v) for v in COUNTS.values()) + "\n")
    n = COUNTS["paper"]
    x = (rng.standard_normal((n, dim)) * 0.1).astype(np.float32)
    y = rng.integers(0, ogb_mag.NUM_CLASSES, n)
    np.savetxt(raw / "node-feat" / "paper" / "node-feat.csv.gz", x, fmt="%.9g", delimiter=",")
    np.savetxt(raw / "node-feat" / "paper" / "node_year.csv.gz", rng.integers(2010, 2020, n), fmt="%d")
    np.savetxt(raw / "node-label" / "paper" / "node-label.csv.gz", y.reshape(-1, 1), fmt="%d")
    edges = {}
    for et, m in zip(EDGE_TYPES, (280, 900, 1200, 700)):
        src = rng.integers(0, COUNTS[et[0]], m)
        dst = rng.integers(0, COUNTS[et[2]], m)
        if et[0] == et[2]:
            src, dst = src[src != dst], dst[src != dst]
        else:  # OGB's bipartite relations hold each pair once
            pairs = np.unique(np.stack([src, dst], 1), axis=0)
            pairs = pairs[rng.permutation(len(pairs))]
            src, dst = pairs[:, 0], pairs[:, 1]
        folder = raw / "relations" / "___".join(et)
        folder.mkdir(parents=True)
        np.savetxt(folder / "edge.csv.gz", np.stack([src, dst], 1), fmt="%d", delimiter=",")
        np.savetxt(folder / "num-edge-list.csv.gz", [len(src)], fmt="%d")
        edges[et] = torch.from_numpy(np.stack([src, dst]).astype(np.int64))
    perm = rng.permutation(n)
    split = {"train": np.sort(perm[:180]), "valid": np.sort(perm[180:215]), "test": np.sort(perm[215:])}
    (d / "split" / "time" / "paper").mkdir(parents=True)
    for k, idx in split.items():
        np.savetxt(d / "split" / "time" / "paper" / f"{k}.csv.gz", idx.reshape(-1, 1), fmt="%d")
    return {"x": x, "y": y, "edges": edges, "split": split}


def _pairs(edge_index: torch.Tensor) -> set:
    return set(map(tuple, edge_index.t().tolist()))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("ogb")
    wrote = write_mag(root)
    out = ogb_mag.prepare(root, progress=False)
    return root, out, wrote


def test_the_miniature_reads_as_pyg_ogb_mag_with_to_undirected(prepared):
    from torch_geometric.data import HeteroData
    from torch_geometric.transforms import ToUndirected

    root, out, wrote = prepared
    assert out == root / "ogbn_mag" / "ibp_prepared"
    ds = HeteroPreparedDataset.load(out, verify="full")
    assert ds.name == "ogbn-mag" and ds.target == "paper" and ds.num_classes == 349
    assert ds.num_nodes_dict == {"paper": 250, "author": 300, "institution": 12, "field_of_study": 40}
    assert torch.equal(ds.x_dict["paper"], torch.from_numpy(wrote["x"])) and set(ds.x_dict) == {"paper"}
    assert torch.equal(ds.y, torch.from_numpy(wrote["y"]))
    for k, idx in wrote["split"].items():
        assert torch.equal(ds.split[k], torch.from_numpy(idx))
    # the reference: PyG's ToUndirected on the raw edge types
    ref = HeteroData()
    for t, n in COUNTS.items():
        ref[t].num_nodes = n
    for et, ei in wrote["edges"].items():
        ref[et].edge_index = ei
    ref = ToUndirected()(ref)
    assert set(ds.edge_types) == set(ref.edge_types) and len(ds.edge_types) == 7
    for et in ref.edge_types:
        got = edge_index(ds.relations[et])
        assert got.shape == ref[et].edge_index.shape, et
        assert _pairs(got) == _pairs(ref[et].edge_index), et
    assert ds.store_codec in ("ibp", "ebp", "identity")
    assert torch.equal(ds.store().decode_rows(torch.arange(250)), ds.x_dict["paper"])


def test_damage_to_a_prepared_array_is_named_on_load(prepared, tmp_path):
    import shutil

    _, out, _ = prepared
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    path = copy / "edges" / "paper___cites___paper" / "indices.npy"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match="paper___cites___paper/indices.npy"):
        HeteroPreparedDataset.load(copy, verify="full")
    # unverified, a source id past the source type's nodes is still refused by the structure check
    np.save(path, np.full(np.load(path).shape, 10_000, dtype=np.load(path).dtype))
    with pytest.raises(ValueError, match=r"paper___cites___paper is not a valid edge type: indices must name "
                                         r"source nodes in \[0, num_src=250\)"):
        HeteroPreparedDataset.load(copy, verify="none")


def test_missing_files_are_named_with_the_url(tmp_path, capsys):
    write_mag(tmp_path)
    (tmp_path / "ogbn_mag" / "raw" / "relations" / "author___writes___paper" / "edge.csv.gz").unlink()
    (tmp_path / "ogbn_mag" / "split" / "time" / "paper" / "valid.csv.gz").unlink()
    with pytest.raises(MissingOGBFilesError) as e:
        ogb_mag.prepare(tmp_path, progress=False)
    text = str(e.value)
    assert "raw/relations/author___writes___paper/edge.csv.gz" in text and "split/time/paper/valid.csv.gz" in text
    assert ogb_mag.URL in text and "2 raw file(s) missing" in text
    assert cli(["prepare", "--dataset", "ogbn-mag", "--root", str(tmp_path), "--quiet"]) == 1
    assert "author___writes___paper/edge.csv.gz" in capsys.readouterr().err


def test_damaged_and_inconsistent_raw_files_are_named(tmp_path):
    write_mag(tmp_path)
    rel = tmp_path / "ogbn_mag" / "raw" / "relations" / "paper___has_topic___field_of_study" / "edge.csv.gz"
    np.savetxt(rel, [[0, 40]], fmt="%d", delimiter=",")  # field 40 of 40
    with pytest.raises(DamagedOGBFileError, match=r"has_topic___field_of_study/edge.csv.gz is damaged: it names "
                                                  r"destination node 40, outside \[0, 40\)"):
        ogb_mag.prepare(tmp_path, progress=False)
    rel.write_bytes(b"not a gzip file")
    with pytest.raises(DamagedOGBFileError, match=f"a good copy is in {ogb_mag.URL}"):
        ogb_mag.prepare(tmp_path, progress=False)
    assert not list(tmp_path.glob("ogbn_mag/ibp_prepared*"))  # no half-written folder left


def test_prepare_command_writes_the_folder_without_a_store(tmp_path, capsys):
    write_mag(tmp_path)
    out = tmp_path / "prepared"
    assert cli(["prepare", "--dataset", "ogbn-mag", "--root", str(tmp_path), "--out", str(out), "--no-store"]) == 0
    assert "prepared ogbn-mag" in capsys.readouterr().out
    ds = HeteroPreparedDataset.load(out)
    assert not ds.has_store() and ds.store_codec is None and ds.num_edges == sum(
        r.num_edges for r in ds.relations.values())


def test_verify_command_checks_the_folder_and_its_store(prepared, tmp_path, capsys):
    import shutil

    _, out, _ = prepared
    assert cli(["verify", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "(hetero): ok" in lines[0] and "nodes/paper/store (store): ok" in lines[1]
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    y = copy / "y.npy"
    y.write_bytes(y.read_bytes()[:-8])
    assert cli(["verify", str(copy)]) == 1
    assert "(hetero): DAMAGED" in capsys.readouterr().out


def test_prepare_refuses_options_that_do_not_apply_to_mag(tmp_path, capsys):
    write_mag(tmp_path)
    with pytest.raises(SystemExit):
        cli(["prepare", "--dataset", "ogbn-mag", "--root", str(tmp_path), "--directed"])
    assert "--directed applies to homogeneous OGB data sets" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli(["prepare", "--dataset", "ogbn-mag", "--root", str(tmp_path), "--set", "data.mag.num_papers=5"])
    assert "--config and --set apply to --dataset synthetic and synthetic-mag only" in capsys.readouterr().err
    assert not (tmp_path / "ogbn_mag" / "ibp_prepared").exists()


MAG240M_COUNTS = {"paper": 300, "author": 350, "institution": 9}


def write_mag240m(root: Path, seed: int = 1, numpy1_names: bool = False) -> dict:
    """A miniature MAG240M under root/mag240m_kddcup2021 (OGB-LSC's layout); `numpy1_names` pickles the split
    arrays the way numpy 1 did (numpy.core.multiarray._reconstruct), as the published split_dict.pt is."""
    from ibp_graph.data.ogb_mag import MAG240M_EDGE_TYPES

    rng = np.random.default_rng(seed)
    d = root / "mag240m_kddcup2021"
    (d / "processed" / "paper").mkdir(parents=True)
    n = MAG240M_COUNTS["paper"]
    torch.save({**MAG240M_COUNTS, "num_classes": 153}, d / "meta.pt")
    x = (rng.standard_normal((n, 16)) * 0.1).astype(np.float16)
    y = rng.integers(0, 153, n).astype(np.float32)
    perm = rng.permutation(n)
    split = {"train": np.sort(perm[:200]), "valid": np.sort(perm[200:240]), "test": np.sort(perm[240:])}
    y[split["test"]] = np.nan  # hidden, as in the published files
    y[perm[:10]] = np.nan  # a few unlabeled training papers: dropped from the split
    np.save(d / "processed" / "paper" / "node_feat.npy", x)
    np.save(d / "processed" / "paper" / "node_label.npy", y)
    np.save(d / "processed" / "paper" / "node_year.npy", rng.integers(2000, 2021, n))
    edges = {}
    for et, m in zip(MAG240M_EDGE_TYPES, (200, 900, 1500)):
        ei = np.stack([rng.integers(0, MAG240M_COUNTS[et[0]], m), rng.integers(0, MAG240M_COUNTS[et[2]], m)])
        if et[0] != et[2]:
            ei = np.unique(ei, axis=1)
        (d / "processed" / "___".join(et)).mkdir()
        np.save(d / "processed" / "___".join(et) / "edge_index.npy", ei)
        edges[et] = ei
    reconstruct = np.ndarray.__reduce__(np.zeros(1))[0]
    module = reconstruct.__module__
    try:
        if numpy1_names:
            reconstruct.__module__ = "numpy.core.multiarray"
        torch.save(split, d / "split_dict.pt")
    finally:
        reconstruct.__module__ = module
    return {"x": x, "y": y, "split": split, "edges": edges}


@pytest.mark.parametrize("numpy1_names", [False, True])
def test_mag240m_miniature_prepares_like_ogb_lsc_reads_it(tmp_path, capsys, numpy1_names):
    wrote = write_mag240m(tmp_path, numpy1_names=numpy1_names)
    if numpy1_names:
        assert b"numpy.core.multiarray" in (tmp_path / "mag240m_kddcup2021" / "split_dict.pt").read_bytes()
    out = ogb_mag.prepare_mag240m(tmp_path, progress=True)
    assert "prepared mag240m" in capsys.readouterr().out
    ds = HeteroPreparedDataset.load(out, verify="full")
    assert ds.num_nodes_dict == MAG240M_COUNTS and ds.num_classes == 153 and len(ds.edge_types) == 5
    assert ds.x.dtype == torch.float16 and torch.equal(ds.x, torch.from_numpy(wrote["x"]))
    y = wrote["y"]
    assert torch.equal(ds.y, torch.from_numpy(np.where(np.isnan(y), -1, np.nan_to_num(y)).astype(np.int64)))
    assert torch.equal(ds.split["train"], torch.from_numpy(wrote["split"]["train"][~np.isnan(y[wrote["split"]["train"]])]))
    assert ds.split["test"].numel() == 0 and ds.split["valid"].numel() == 40  # test labels are hidden
    for et, ei in wrote["edges"].items():
        got = edge_index(ds.relations[et])
        if et[0] == et[2]:
            ei = np.concatenate([ei, ei[::-1]], 1)
        assert _pairs(got) == set(map(tuple, ei.T.tolist())), et
    assert torch.equal(ds.store().decode_rows(torch.arange(300)), ds.x)


def test_mag240m_refuses_pickled_objects_and_names_missing_files(tmp_path):
    write_mag240m(tmp_path)
    (tmp_path / "mag240m_kddcup2021" / "processed" / "paper" / "node_label.npy").unlink()
    with pytest.raises(MissingOGBFilesError, match=r"processed/paper/node_label.npy.*mag240m_kddcup2021.zip"):
        ogb_mag.prepare_mag240m(tmp_path, progress=False)
    write_mag240m(tmp_path / "b")
    import datetime

    torch.save({"train": datetime.date(2021, 3, 15)}, tmp_path / "b" / "mag240m_kddcup2021" / "split_dict.pt")
    with pytest.raises(DamagedOGBFileError, match="split_dict.pt is damaged: it holds objects other than .*"
                                                  "a good copy is in https://dgl-data"):
        ogb_mag.prepare_mag240m(tmp_path / "b", progress=False)
