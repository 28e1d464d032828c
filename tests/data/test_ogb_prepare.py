"""`ibp-graph prepare` on miniature data sets in OGB's exact raw layout, then one training epoch.

The layouts follow ogb 1.3.6 (ogb/nodeproppred/dataset.py, ogb/io/read_graph_raw.py):
binary data sets keep ``raw/data.npz`` (edge_index, num_nodes_list, num_edges_list,
node_feat, node_year) and ``raw/node-label.npz`` (node_label, NaN = unlabeled); CSV
data sets keep ``raw/edge.csv.gz``, ``raw/node-feat.csv.gz``, ``raw/num-node-list.csv.gz``,
``raw/num-edge-list.csv.gz``, ``raw/node-label.csv.gz``; splits are
``split/<split>/{train,valid,test}.csv.gz`` (one node id per line, no header).
When ogb is installed, its own readers check that the miniatures are read as OGB reads them.
"""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ibp_graph.cli import main as cli
from ibp_graph.data.ogb import MissingOGBFilesError, OGB_DATASETS, prepare, required_files
from ibp_graph.data.prepared import PreparedDataset

ROOT = Path(__file__).resolve().parents[2]


def _mini(n=400, e=2500, dim=16, classes=None, seed=0, nan_labels=True):
    rng = np.random.default_rng(seed)
    edge_index = rng.integers(0, n, (2, e)).astype(np.int64)
    x = (rng.standard_normal((n, dim)) * 0.1).astype(np.float32)
    y = rng.integers(0, classes, n).astype(np.float32)
    if nan_labels:
        y[rng.random(n) < 0.4] = np.nan
    year = rng.integers(2000, 2021, n).astype(np.int64)
    labeled = np.flatnonzero(~np.isnan(y))
    perm = rng.permutation(labeled)
    a, b = int(0.7 * len(perm)), int(0.85 * len(perm))
    split = {"train": np.sort(perm[:a]), "valid": np.sort(perm[a:b]), "test": np.sort(perm[b:])}
    return edge_index, x, y, year, split


def _write_split(d: Path, split: dict):
    d.mkdir(parents=True, exist_ok=True)
    for k, idx in split.items():
        np.savetxt(d / f"{k}.csv.gz", idx.reshape(-1, 1), fmt="%d")


def write_binary(root: Path, name="ogbn-papers100M", **kw):
    spec = OGB_DATASETS[name]
    edge_index, x, y, year, split = _mini(classes=spec.num_classes, **kw)
    d = root / spec.dir_name
    (d / "raw").mkdir(parents=True)
    np.savez_compressed(d / "raw" / "data.npz", edge_index=edge_index, num_nodes_list=np.array([x.shape[0]]),
                        num_edges_list=np.array([edge_index.shape[1]]), node_feat=x, node_year=year.reshape(-1, 1))
    np.savez_compressed(d / "raw" / "node-label.npz", node_label=y.reshape(-1, 1))
    _write_split(d / "split" / spec.split, split)
    (d / "RELEASE_v1.txt").write_text("miniature\n")
    return edge_index, x, y, split


def write_csv(root: Path, name="ogbn-arxiv", **kw):
    spec = OGB_DATASETS[name]
    edge_index, x, y, year, split = _mini(classes=spec.num_classes, nan_labels=False, **kw)
    d = root / spec.dir_name
    (d / "raw").mkdir(parents=True)
    np.savetxt(d / "raw" / "edge.csv.gz", edge_index.T, fmt="%d", delimiter=",")
    np.savetxt(d / "raw" / "node-feat.csv.gz", x, fmt="%.9g", delimiter=",")  # float32 round trip
    np.savetxt(d / "raw" / "num-node-list.csv.gz", [x.shape[0]], fmt="%d")
    np.savetxt(d / "raw" / "num-edge-list.csv.gz", [edge_index.shape[1]], fmt="%d")
    np.savetxt(d / "raw" / "node-label.csv.gz", y.reshape(-1, 1), fmt="%d")
    np.savetxt(d / "raw" / "node_year.csv.gz", year.reshape(-1, 1), fmt="%d")
    _write_split(d / "split" / spec.split, split)
    return edge_index, x, y, split


def _undirected_reference(edge_index, n):
    from torch_geometric.utils import to_undirected

    from ibp_graph.sampling.graph import CSCGraph

    return CSCGraph.from_edge_index(to_undirected(torch.from_numpy(edge_index), num_nodes=n), n)


def _check_prepared(out: Path, edge_index, x, y, split, num_classes):
    ds = PreparedDataset.load(out)
    n = x.shape[0]
    assert ds.num_nodes == n and ds.num_classes == num_classes
    assert torch.equal(ds.x, torch.from_numpy(x))
    want_y = np.where(np.isnan(y), -1, np.nan_to_num(y, nan=-1)).astype(np.int64)
    assert ds.y.dtype == torch.int64 and torch.equal(ds.y, torch.from_numpy(want_y))
    for k in ("train", "valid", "test"):
        assert torch.equal(ds.split[k], torch.from_numpy(split[k]))
    ref = _undirected_reference(edge_index, n)
    assert np.array_equal(ds.graph.indptr, ref.indptr) and np.array_equal(ds.graph.indices, ref.indices)
    store = ds.store()
    assert torch.equal(store.decode_rows(torch.arange(n)), ds.x)  # lossless
    assert 0 < store.fraction < 1.2
    return ds


def test_papers100m_binary_layout(tmp_path, capsys):
    edge_index, x, y, split = write_binary(tmp_path)
    split["train"] = np.append(split["train"], np.flatnonzero(np.isnan(y))[:3])  # unlabeled: dropped
    _write_split(tmp_path / "ogbn_papers100M" / "split" / "time", split)
    out = prepare("ogbn-papers100M", tmp_path, chunk_rows=97)  # chunks that do not divide anything
    assert out == tmp_path / "ogbn_papers100M" / "ibp_prepared"
    split["train"] = split["train"][:-3]
    ds = _check_prepared(out, edge_index, x, y, split, 172)
    assert ds.meta["unlabeled_split_nodes_dropped"]["train"] == 3
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("prepared ogbn-papers100M") and "feature store" in line and "of raw" in line


def test_arxiv_csv_layout_through_the_cli(tmp_path, capsys):
    edge_index, x, y, split = write_csv(tmp_path)
    out = tmp_path / "prepared-arxiv"
    assert cli(["prepare", "--dataset", "ogbn-arxiv", "--root", str(tmp_path), "--out", str(out), "--quiet"]) == 0
    _check_prepared(out, edge_index, x, y, split, 40)
    assert "prepared ogbn-arxiv" not in capsys.readouterr().out  # --quiet


def test_products_directed_keeps_ogbs_inverse_edges(tmp_path):
    edge_index, x, y, split = write_csv(tmp_path, "ogbn-products")
    out = prepare("ogbn-products", tmp_path, tmp_path / "p", undirected=False, store=False, progress=False)
    ds = PreparedDataset.load(out)
    assert ds.graph.num_edges == 2 * edge_index.shape[1]  # add_inverse_edge, duplicates kept
    assert not ds.has_store()


def test_store_codec_defaults_to_fit_codecs_choice(tmp_path, capsys):
    from ibp_graph.codec import fit_codec

    edge_index, x, y, split = write_binary(tmp_path, n=3000, dim=32)  # 384 KB of features
    out = prepare("ogbn-papers100M", tmp_path)
    ds = _check_prepared(out, edge_index, x, y, split, 172)
    chosen = fit_codec(torch.from_numpy(x))
    assert ds.meta["store_codec"] == ds.store_codec == chosen.name != "identity"
    assert ds.store().codec.fingerprint == chosen.fingerprint
    assert f"feature store ({chosen.name})" in capsys.readouterr().out.strip().splitlines()[-1]


def test_prepared_ebp_store_round_trips_through_the_cli(tmp_path):
    from ibp_graph.codec import EBPCodec
    from ibp_graph.data.store import EncodedTable

    edge_index, x, y, split = write_csv(tmp_path, n=1200, dim=24)
    out = tmp_path / "prepared-ebp"
    assert cli(["prepare", "--dataset", "ogbn-arxiv", "--root", str(tmp_path), "--out", str(out), "--quiet",
                "--codec", "ebp"]) == 0
    ds = _check_prepared(out, edge_index, x, y, split, 40)
    assert ds.meta["store_codec"] == ds.store_codec == "ebp"
    store = ds.store()
    assert isinstance(store.codec, EBPCodec)
    assert store.codec.fingerprint == EBPCodec.fit(torch.from_numpy(x)).fingerprint  # the state, restored
    rows = torch.randint(0, 1200, (500,), generator=torch.Generator().manual_seed(0))
    assert torch.equal(store.codec.decode(store.index_select(rows)), ds.x[rows])  # gather, then decode
    again = EncodedTable.load(ds.store_dir, mmap=False)
    assert again.codec.fingerprint == store.codec.fingerprint


def test_unknown_store_codec_is_refused_before_any_work(tmp_path, capsys):
    write_csv(tmp_path)
    with pytest.raises(ValueError, match=r"codec='zstd' is not accepted; use one of \('auto', 'ibp', 'ebp', "
                                         r"'identity'\)"):
        prepare("ogbn-arxiv", tmp_path, tmp_path / "p", codec="zstd", progress=False)
    assert not (tmp_path / "p").exists() and not list(tmp_path.glob("p.tmp-*"))
    with pytest.raises(SystemExit):
        cli(["prepare", "--dataset", "ogbn-arxiv", "--root", str(tmp_path), "--codec", "zstd"])
    assert "invalid choice: 'zstd'" in capsys.readouterr().err


def test_missing_files_are_named_with_where_ogb_publishes_them(tmp_path, capsys):
    with pytest.raises(MissingOGBFilesError) as err:
        prepare("ogbn-papers100M", tmp_path, progress=False)
    text = str(err.value)
    for f in required_files("ogbn-papers100M"):
        assert f in text
    assert "http://snap.stanford.edu/ogb/data/nodeproppred/papers100M-bin.zip" in text
    write_csv(tmp_path, "ogbn-arxiv")
    (tmp_path / "ogbn_arxiv" / "raw" / "node-feat.csv.gz").unlink()
    assert cli(["prepare", "--dataset", "ogbn-arxiv", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "node-feat.csv.gz" in err and "arxiv.zip" in err and "edge.csv.gz" not in err


def test_miniatures_read_like_ogb_reads_them(tmp_path):
    raw = pytest.importorskip("ogb.io.read_graph_raw")
    edge_index, x, y, _ = write_binary(tmp_path)
    g = raw.read_binary_graph_raw(str(tmp_path / "ogbn_papers100M" / "raw"))[0]
    assert np.array_equal(g["edge_index"], edge_index) and np.array_equal(g["node_feat"], x)
    edge_index, x, y, _ = write_csv(tmp_path / "csv")
    g = raw.read_csv_graph_raw(str(tmp_path / "csv" / "ogbn_arxiv" / "raw"), additional_node_files=["node_year"])[0]
    assert np.array_equal(g["edge_index"], edge_index) and np.array_equal(g["node_feat"], x)


def test_papers100m_script_trains_one_epoch_on_the_miniature(tmp_path, capsys):
    write_binary(tmp_path)
    spec = importlib.util.spec_from_file_location("train_papers100m_pyg", ROOT / "scripts" / "train_papers100m_pyg.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    rc = script.main(["--root", str(tmp_path), "--epochs", "1", "--hidden", "16", "--num-neighbors", "4", "3",
                      "--batch-size", "64", "--num-workers", "0", "--device", "cpu", "--out", str(tmp_path / "runs"),
                      "--no-progress"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "epoch  1/1" in out and "moved" in out
    (run,) = (tmp_path / "runs").glob("papers100m-*.json")
    result = json.loads(run.read_text())
    assert result["dataset"] == "ogbn-papers100M" and result["codec"] == "auto" and result["features"] == "store"
    assert len(result["epochs"]) == 1 and 0 < result["final"]["fraction"] < 1.2


@pytest.mark.parametrize("undirected, dedup", [(False, False), (True, False), (True, True)])
def test_a_graph_built_with_uint32_edge_ids_equals_the_int32_one(tmp_path, monkeypatch, undirected, dedup):
    """build_csc writes e_id as uint32 when the edge ids pass 2**31 (ogbn-papers100M's 3.2 G undirected edges:
    13 GB instead of 26); its placement, dedup and compaction kernels give the int32 build's arrays."""
    from ibp_graph.data import prepared as prep

    rng = np.random.default_rng(7)
    src, dst = rng.integers(0, 300, 4000), rng.integers(0, 300, 4000)

    def chunks():
        for lo in range(0, 4000, 1500):
            yield src[lo:lo + 1500], dst[lo:lo + 1500]

    narrow = prep.build_csc(chunks, 300, tmp_path / "a", undirected=undirected, dedup=dedup, progress=False)
    monkeypatch.setattr(prep, "edge_id_dtype", lambda count: np.dtype(np.uint32))
    wide = prep.build_csc(chunks, 300, tmp_path / "b", undirected=undirected, dedup=dedup, progress=False)
    assert narrow.e_id.dtype == np.int32 and wide.e_id.dtype == np.uint32
    assert wide.num_edge_ids == narrow.num_edge_ids == 4000 * (2 if undirected else 1)
    for name in ("indptr", "indices", "e_id"):
        np.testing.assert_array_equal(getattr(wide, name), getattr(narrow, name))


@pytest.mark.parametrize("layout", ["binary", "csv"])
def test_an_edge_outside_the_node_count_names_the_edge_file(tmp_path, capsys, layout):
    """An edge id outside [0, num_nodes) is damage of the edge file, named with where a good copy is; nothing is
    written."""
    if layout == "binary":
        write_binary(tmp_path)
        npz = tmp_path / "ogbn_papers100M" / "raw" / "data.npz"
        arrays = dict(np.load(npz))
        arrays["edge_index"][1, 7] = 10 ** 9
        np.savez_compressed(npz, **arrays)
        name, path, zip_name = "ogbn-papers100M", npz, "papers100M-bin/raw/data.npz"
    else:
        edge_index, *_ = write_csv(tmp_path)
        path = tmp_path / "ogbn_arxiv" / "raw" / "edge.csv.gz"
        edge_index[0, 3] = -2
        np.savetxt(path, edge_index.T, fmt="%d", delimiter=",")
        name, zip_name = "ogbn-arxiv", "arxiv/raw/edge.csv.gz"
    assert cli(["prepare", "--dataset", name, "--root", str(tmp_path), "--quiet"]) == 1
    err = capsys.readouterr().err
    bad = "destination node 1000000000" if layout == "binary" else "source node -2"
    assert f"{path} is damaged: an edge names {bad}, outside [0, 400)" in err and zip_name in err
    d = path.parent.parent
    assert sorted(p.name for p in d.iterdir() if not p.name.startswith("RELEASE")) == ["raw", "split"]


@pytest.mark.parametrize("content", [b"3\n1.5\n7\n", b"3,4\n5,6\n"])
def test_a_split_file_of_other_than_one_integer_node_id_per_line_is_refused(tmp_path, capsys, content):
    """A split file holding 1.5 (which int64 would truncate to node 1) or two ids a line is damaged, named; nothing
    is written."""
    import gzip

    write_binary(tmp_path)
    path = tmp_path / "ogbn_papers100M" / "split" / "time" / "valid.csv.gz"
    path.write_bytes(gzip.compress(content))
    assert cli(["prepare", "--dataset", "ogbn-papers100M", "--root", str(tmp_path), "--quiet"]) == 1
    err = capsys.readouterr().err
    what = "it holds 1.5 where an integer is expected" if b"." in content else \
        "a line holds 2 values; expected one node id per line"
    assert f"{path} is damaged: {what}" in err and "papers100M-bin/split/time/valid.csv.gz" in err
    assert not (tmp_path / "ogbn_papers100M" / "ibp_prepared").exists()
