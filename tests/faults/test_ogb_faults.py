"""Issue 13, OGB row: damaged raw files given to prepare name the file, what is wrong and where a good copy is."""

import pytest

from ibp_graph.cli import main as cli
from ibp_graph.data.ogb import OGB_DATASETS, DamagedOGBFileError, prepare
from tests.data.test_ogb_prepare import write_binary, write_csv


def _no_work_folders(root):
    return [p for p in root.rglob("*") if ".tmp-" in p.name] == []


@pytest.mark.parametrize("cut", ["head", "tail"])
def test_a_truncated_npz_is_named_with_the_download_url(tmp_path, cut):
    write_binary(tmp_path)
    spec = OGB_DATASETS["ogbn-papers100M"]
    path = tmp_path / spec.dir_name / "raw" / "data.npz"
    data = path.read_bytes()
    path.write_bytes(data[:200] if cut == "head" else data[: len(data) - 300])
    with pytest.raises(DamagedOGBFileError) as e:
        prepare("ogbn-papers100M", tmp_path, progress=False)
    msg = str(e.value)
    assert msg.startswith(f"{path} is damaged: ") and "BadZipFile" in msg
    assert f"a good copy is in {spec.url} as papers100M-bin/raw/data.npz" in msg
    assert _no_work_folders(tmp_path)


def test_a_damaged_member_inside_the_npz_is_named(tmp_path):
    write_binary(tmp_path)
    path = tmp_path / OGB_DATASETS["ogbn-papers100M"].dir_name / "raw" / "node-label.npz"
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside the compressed stream: a zlib or CRC error while reading
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedOGBFileError, match=rf"{path} is damaged: .*; a good copy is in http"):
        prepare("ogbn-papers100M", tmp_path, progress=False)
    assert _no_work_folders(tmp_path)


@pytest.mark.parametrize("damage", ["not gzip", "truncated"])
def test_a_damaged_csv_gz_is_named_through_the_cli(tmp_path, capsys, damage):
    write_csv(tmp_path)
    spec = OGB_DATASETS["ogbn-arxiv"]
    path = tmp_path / spec.dir_name / "raw" / "node-feat.csv.gz"
    data = path.read_bytes()
    path.write_bytes(b"plain text, not gzip\n" if damage == "not gzip" else data[: len(data) // 2])
    assert cli(["prepare", "--dataset", "ogbn-arxiv", "--root", str(tmp_path), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"ibp-graph prepare: {path} is damaged: " in err
    assert f"a good copy is in {spec.url} as arxiv/raw/node-feat.csv.gz" in err
    assert "Traceback" not in err and _no_work_folders(tmp_path)


@pytest.mark.parametrize("layout", ["csv", "binary"])
def test_an_edge_file_with_another_edge_count_than_ogb_records_is_refused(tmp_path, layout):
    # OGB's readers take the edges num-edge-list.csv.gz / data.npz's num_edges_list counts: an edge file that
    # lists another number (cut at a line, or from another release) is not the graph those files describe
    import numpy as np

    if layout == "csv":
        edge_index, *_ = write_csv(tmp_path)
        path = tmp_path / OGB_DATASETS["ogbn-arxiv"].dir_name / "raw" / "edge.csv.gz"
        np.savetxt(path, edge_index.T[:1000], fmt="%d", delimiter=",")
        name, what = "ogbn-arxiv", "edge.csv.gz"
    else:
        write_binary(tmp_path)
        path = tmp_path / OGB_DATASETS["ogbn-papers100M"].dir_name / "raw" / "data.npz"
        with np.load(path) as z:
            arrays = dict(z)
        arrays["num_edges_list"] = arrays["num_edges_list"] + 7
        np.savez_compressed(path, **arrays)
        name, what = "ogbn-papers100M", "num_edges_list"
    with pytest.raises(DamagedOGBFileError, match=rf"{path} is damaged: .*{what}"):
        prepare(name, tmp_path, progress=False, store=False)
    assert _no_work_folders(tmp_path) and not (path.parents[1] / "ibp_prepared").exists()


def test_an_edge_csv_with_other_than_two_columns_is_refused(tmp_path):
    import numpy as np

    edge_index, *_ = write_csv(tmp_path)
    path = tmp_path / OGB_DATASETS["ogbn-arxiv"].dir_name / "raw" / "edge.csv.gz"
    three = np.concatenate([edge_index, edge_index[:1]]).T  # source,target,something: not OGB's edge list
    np.savetxt(path, three, fmt="%d", delimiter=",")
    with pytest.raises(DamagedOGBFileError, match=rf"{path} is damaged: .*3 values"):
        prepare("ogbn-arxiv", tmp_path, progress=False, store=False)
    assert _no_work_folders(tmp_path)
