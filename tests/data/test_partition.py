"""METIS node -> rank assignments for sharded tables (data.partition) and `prepare --partition metis`."""
import json
import sys

import numpy as np
import pytest
import torch

from ibp_graph.data.partition import metis_layout, undirected_csr
from ibp_graph.data.shards import load_shard
from ibp_graph.sampling.graph import CSCGraph


def _csc(src, dst, n):
    g = CSCGraph.from_edge_index(torch.tensor([src, dst]), n)
    return g.indptr, g.indices


def test_undirected_csr_is_the_simple_undirected_graph():
    rng = np.random.default_rng(0)
    n = 40
    src, dst = rng.integers(0, n, 300), rng.integers(0, n, 300)
    indptr, indices = _csc(src.tolist(), dst.tolist(), n)
    xadj, adjncy = undirected_csr(indptr, indices, n)
    got = {(v, int(u)) for v in range(n) for u in adjncy[xadj[v]:xadj[v + 1]]}
    want = {(int(a), int(b)) for a, b in zip(src, dst) if a != b} | {(int(b), int(a)) for a, b in zip(src, dst) if a != b}
    assert got == want
    assert all(np.all(np.diff(adjncy[xadj[v]:xadj[v + 1]]) > 0) for v in range(n))  # ascending, no repeats


def test_metis_keeps_two_communities_apart():
    # two 30-node cliques, ids interleaved (even ids: one, odd ids: the other), joined by one edge
    a, b = list(range(0, 60, 2)), list(range(1, 60, 2))
    edges = [(u, v) for part in (a, b) for u in part for v in part if u != v] + [(0, 1)]
    indptr, indices = _csc([e[0] for e in edges], [e[1] for e in edges], 60)
    layout = metis_layout(indptr, indices, 60, 2)
    owner = layout.owner_array()
    assert layout.kind == "assignment" and sorted(layout.counts.tolist()) == [30, 30]
    assert len(set(owner[a].tolist())) == 1 and len(set(owner[b].tolist())) == 1 and owner[0] != owner[1]
    ranges = np.repeat([0, 1], 30)  # contiguous ranges cut half of every clique's edges
    cut = lambda o: sum(o[u] != o[v] for u, v in edges)  # noqa: E731
    assert cut(owner) == 1 < cut(ranges)


def test_metis_errors_name_what_is_accepted(monkeypatch):
    indptr, indices = _csc([0, 1], [1, 2], 3)
    with pytest.raises(ValueError, match="world_size=4 is more than the graph's 3 nodes"):
        metis_layout(indptr, indices, 3, 4)
    assert metis_layout(indptr, indices, 3, 1).counts.tolist() == [3]
    # a CSC that is not one of num_nodes nodes: named before numpy or METIS meets it
    indptr, indices = np.asarray(indptr), np.asarray(indices)
    with pytest.raises(IndexError, match=r"indices contains 7, outside the valid range \[0, num_nodes=3\)"):
        metis_layout(indptr, np.where(indices == 1, 7, indices), 3, 2)
    with pytest.raises(ValueError, match=r"indptr has shape \(3,\) .*accepted: a 1-d integer array of num_nodes "
                                         r"\+ 1 = 4 offsets"):
        metis_layout(indptr[:-1], indices, 3, 2)
    with pytest.raises(ValueError, match=r"indptr runs from 0 to 2; accepted: non-decreasing offsets from 0 to "
                                         r"the 1 entries of indices"):
        metis_layout(indptr, indices[:1], 3, 2)
    with pytest.raises(ValueError, match=r"num_nodes='3' is not accepted; use an int >= 0"):
        metis_layout(indptr, indices, "3", 2)
    monkeypatch.setitem(sys.modules, "pymetis", None)
    with pytest.raises(ImportError, match=r"pip install 'ibp-graph\[metis\]'"):
        metis_layout(indptr, indices, 3, 2)


def test_prepare_partition_metis_writes_assignment_shards(tmp_path, capsys):
    from ibp_graph.cli import main
    from ibp_graph.data.prepared import PreparedDataset

    sets = ["--set", "data.synthetic.num_nodes=400", "--set", "data.synthetic.dim=4"]
    base = ["prepare", "--dataset", "synthetic", "--root", str(tmp_path), *sets, "--quiet"]
    with pytest.raises(SystemExit):
        main(base + ["--partition", "metis"])
    assert "--partition metis without --shards is not accepted" in capsys.readouterr().err
    assert main(base + ["--shards", "2", "--partition", "metis"]) == 0
    (d,) = tmp_path.glob("synthetic-400-*")
    ds = PreparedDataset.load(d)
    x = ds.x
    for r in range(2):
        shard, layout = load_shard(d / "shards-2", r, world_size=2)
        assert layout.kind == "assignment"
        rows = torch.from_numpy(layout.rows_of(r))
        assert torch.equal(shard.codec.decode(shard.compressed).view(torch.int32), x[rows].view(torch.int32))
    # neighbours are more often on one rank than with contiguous ranges
    g = ds.graph
    dst = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    same = lambda owner: float(np.mean(owner[g.indices] == owner[dst]))  # noqa: E731
    assert same(layout.owner_array()) > same(np.repeat([0, 1], [200, 200]))


def _part_config(tmp_path, node_map, num_parts):
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"graph_name": "g", "num_parts": num_parts, "node_map": node_map}))
    return path


def test_dgl_layout_follows_the_partition_config_and_the_id_mapping(tmp_path):
    from ibp_graph.data.partition import dgl_layout

    path = _part_config(tmp_path, {"_N": [[0, 4], [4, 4], [4, 10]]}, 3)  # partition 1 empty
    layout = dgl_layout(path)  # ids are DGL's reshuffled ones
    assert layout.owner_array().tolist() == [0] * 4 + [2] * 6
    orig = np.random.default_rng(0).permutation(10)  # orig[new id] = the user's id
    layout = dgl_layout(path, torch.from_numpy(orig))
    new_owner = np.array([0] * 4 + [2] * 6)
    assert np.array_equal(layout.owner_array()[orig], new_owner)
    for r in range(3):
        assert np.array_equal(layout.rows_of(r), np.sort(orig[new_owner == r]))
    hetero = _part_config(tmp_path, {"paper": [[0, 3], [5, 9]], "author": [[3, 5], [9, 10]]}, 2)
    assert dgl_layout(hetero, ntype="author").owner_array().tolist() == [0, 0, 1]


@pytest.mark.parametrize("config, kwargs, match", [
    ("not json", {}, "is not a DGL partition config \\(not JSON"),
    ({"num_parts": 0, "node_map": {"_N": []}}, {}, "it needs num_parts \\(an int >= 1\\) and node_map"),
    ({"num_parts": 2, "node_map": {"_N": [[0, 3]]}}, {}, r"node_map\['_N'\] must list num_parts=2 \[start, end\)"),
    ({"num_parts": 1, "node_map": {"_N": [[3, 1]]}}, {}, "with 0 <= start <= end"),
    ({"num_parts": 1, "node_map": {"a": [[0, 2]], "b": [[2, 3]]}}, {}, r"partitions node types \['a', 'b'\]; pass ntype="),
    ({"num_parts": 1, "node_map": {"a": [[0, 2]]}}, {"ntype": "c"}, r"ntype='c' is not in .*its node types: \['a'\]"),
    ({"num_parts": 1, "node_map": {"_N": [[0, 3]]}}, {"orig_nids": np.array([0, 1])}, "one per node of type '_N' \\(3\\)"),
    ({"num_parts": 1, "node_map": {"_N": [[0, 3]]}}, {"orig_nids": np.array([0, 1, 1])}, "is not a permutation of 0..2"),
    ({"num_parts": 1, "node_map": {"_N": [[0, 3]]}}, {"orig_nids": np.array([0, 1, 3])}, "is not a permutation of 0..2"),
])
def test_dgl_layout_refuses_a_malformed_config_or_mapping(tmp_path, config, kwargs, match):
    from ibp_graph.data.partition import dgl_layout

    path = tmp_path / "g.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    with pytest.raises(ValueError, match=match):
        dgl_layout(path, **kwargs)
    with pytest.raises(FileNotFoundError, match="part_config='.*missing.json': no such file"):
        dgl_layout(tmp_path / "missing.json")


def test_prepare_partition_dgl_writes_shards_of_dgls_partitions(tmp_path, capsys):
    """`prepare --shards 2 --partition dgl --dgl-config --dgl-mapping`: each rank's shard holds the rows of
    its DGL partition (a config and mapping as partition_graph writes and returns them)."""
    from ibp_graph.cli import main
    from ibp_graph.data.prepared import PreparedDataset

    sets = ["--set", "data.synthetic.num_nodes=300", "--set", "data.synthetic.dim=4"]
    base = ["prepare", "--dataset", "synthetic", "--root", str(tmp_path), *sets, "--quiet", "--shards", "2"]
    config = _part_config(tmp_path, {"_N": [[0, 120], [120, 300]]}, 2)
    orig = torch.from_numpy(np.random.default_rng(4).permutation(300))
    torch.save(orig, tmp_path / "orig.pt")
    np.save(tmp_path / "orig.npy", orig.numpy())
    with pytest.raises(SystemExit):
        main(base + ["--partition", "dgl"])
    assert "--partition dgl and --dgl-config go together" in capsys.readouterr().err
    (tmp_path / "bad.pt").write_bytes(b"not a tensor")
    with pytest.raises(SystemExit, match="2"):  # a usage error, before anything is prepared
        main(base + ["--partition", "dgl", "--dgl-config", str(config), "--dgl-mapping", str(tmp_path / "bad.pt")])
    assert "is not a tensor saved with torch.save" in capsys.readouterr().err
    (tmp_path / "three").mkdir()
    three = _part_config(tmp_path / "three", {"_N": [[0, 100], [100, 200], [200, 300]]}, 3)
    assert main(base + ["--partition", "dgl", "--dgl-config", str(three)]) == 1
    assert "partitions 300 nodes into 3 parts" in capsys.readouterr().err
    for mapping in ("orig.pt", "orig.npy"):
        assert main(base + ["--partition", "dgl", "--dgl-config", str(config),
                            "--dgl-mapping", str(tmp_path / mapping)]) == 0
        (d,) = tmp_path.glob("synthetic-300-*")
        x = PreparedDataset.load(d).x
        for r, part in enumerate((orig[:120], orig[120:])):
            shard, layout = load_shard(d / "shards-2", r, world_size=2)
            assert np.array_equal(layout.rows_of(r), np.sort(part.numpy()))
            rows = torch.from_numpy(layout.rows_of(r))
            assert torch.equal(shard.codec.decode(shard.compressed).view(torch.int32), x[rows].view(torch.int32))
