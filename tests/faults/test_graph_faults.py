"""Issue 13, graph and prepared-folder rows: a damaged CSC graph or array is refused by name before the sampler runs."""
import json
import shutil

import numpy as np
import pytest
import torch

from ibp_graph.data import graphgen
from ibp_graph.data.checksums import ChecksumError
from ibp_graph.data.graphgen import GraphSpec
from ibp_graph.data.prepared import PreparedDataset
from ibp_graph.sampling.graph import CSCGraph
from ibp_graph.sampling.neighbor import NeighborSampler
from tests.faults.isolated import expect_clean_exit, run_python

SPEC = GraphSpec(num_nodes=2000, avg_citations=6.0, labeled_fraction=0.5, seed=5)

# Loads the graph folder and samples 2 hops from every node: a crash shows as a non-zero exit.
LOAD_AND_SAMPLE = """
import sys, numpy as np
from ibp_graph.sampling.graph import CSCGraph
from ibp_graph.sampling.neighbor import NeighborSampler
try:
    g = CSCGraph.load(sys.argv[1])
    NeighborSampler(g, [-1, -1]).sample(np.arange(g.num_nodes), seed=0)
    print("SAMPLED")
except Exception as e:
    print("ERROR", type(e).__name__, e)
"""


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    return graphgen.generate(SPEC, tmp_path_factory.mktemp("g") / "ds", progress=False)


def fresh(prepared, tmp_path):
    d = tmp_path / "ds"
    shutil.copytree(prepared, d)
    return d


def edit(path, fn):
    a = np.load(path)
    np.save(path, fn(a.copy()))


def test_an_indptr_that_decreases_is_refused_before_sampling(prepared, tmp_path):
    d = fresh(prepared, tmp_path)
    edit(d / "graph" / "indptr.npy", lambda a: (a.__setitem__(1000, a[1000] + 10**6), a)[1])  # first/last intact
    out = expect_clean_exit(run_python(LOAD_AND_SAMPLE, d / "graph")).strip()
    assert out.startswith("ERROR ValueError") and "graph is not a valid graph: indptr must be non-decreasing" in out
    assert "indptr[1000]" in out
    with pytest.raises(ValueError, match="indptr must be non-decreasing"):
        CSCGraph(np.array([0, 3, 1, 3]), np.zeros(3, np.int32), np.arange(3, dtype=np.int32))


def test_indices_outside_the_nodes_and_a_short_e_id_are_refused(prepared, tmp_path):
    d = fresh(prepared, tmp_path)
    edit(d / "graph" / "indices.npy", lambda a: (a.__setitem__(77, -5), a)[1])
    out = expect_clean_exit(run_python(LOAD_AND_SAMPLE, d / "graph")).strip()
    assert "indices must name nodes in [0, num_nodes=2000); indices[77]=-5" in out
    edit(d / "graph" / "indices.npy", lambda a: (a.__setitem__(77, 0), a)[1])
    edit(d / "graph" / "e_id.npy", lambda a: a[:-1])
    with pytest.raises(ValueError, match="e_id must have one entry per edge"):
        CSCGraph.load(d / "graph")


def test_damaged_graph_files_are_named(prepared, tmp_path):
    d = fresh(prepared, tmp_path)
    (d / "graph" / "meta.json").write_text("[1")
    with pytest.raises(ValueError, match=r"graph/meta.json is not readable JSON"):
        CSCGraph.load(d / "graph")
    d = fresh(prepared, tmp_path / "2")
    data = (d / "graph" / "indices.npy").read_bytes()
    (d / "graph" / "indices.npy").write_bytes(data[:100])
    with pytest.raises(ValueError, match=r"graph/indices.npy is not a readable .npy array"):
        CSCGraph.load(d / "graph")
    with pytest.raises(ChecksumError, match=r"graph/indices.npy has 100 bytes"):
        PreparedDataset.load(d)


def test_a_flipped_bit_in_the_features_is_caught_and_the_store_too(prepared, tmp_path):
    d = fresh(prepared, tmp_path)
    raw = bytearray((d / "x.npy").read_bytes())
    raw[len(raw) // 2] ^= 0x40
    (d / "x.npy").write_bytes(bytes(raw))
    with pytest.raises(ChecksumError, match=r"x.npy: checksum differs"):
        PreparedDataset.load(d)
    ds = PreparedDataset.load(d, verify="none")  # asked for: structure only
    assert ds.x.shape == (SPEC.num_nodes, SPEC.dim)
    shutil.copyfile(prepared / "x.npy", d / "x.npy")
    payload = d / "store" / "x" / "payload.bin"
    raw = bytearray(payload.read_bytes())
    raw[10] ^= 1
    payload.write_bytes(bytes(raw))
    ds = PreparedDataset.load(d)  # the arrays are intact again; the store is checked when opened
    with pytest.raises(ChecksumError, match=r"store/x/payload.bin: checksum differs in chunk\(s\) 0 "):
        ds.store()


def test_writing_into_memory_mapped_features_neither_crashes_nor_changes_the_file(prepared, tmp_path):
    d = fresh(prepared, tmp_path)
    before = (d / "x.npy").read_bytes()
    code = """
    import sys
    from ibp_graph.data.prepared import PreparedDataset
    ds = PreparedDataset.load(sys.argv[1])
    ds.x[:10] = 1.5
    ds.y[:10] = 3
    try:
        ds.graph.indptr[1] = 5
    except ValueError as e:
        print("GRAPH", e)
    print("WROTE", float(ds.x[0, 0]))
    """
    out = expect_clean_exit(run_python(code, d))
    assert "GRAPH assignment destination is read-only" in out and "WROTE 1.5" in out
    assert (d / "x.npy").read_bytes() == before
    PreparedDataset.load(d, verify="full")


def test_the_store_is_opened_once_per_data_set(prepared):
    ds = PreparedDataset.load(prepared)
    assert ds.store() is ds.store()


def test_a_prepared_meta_json_that_is_a_list_is_named(prepared, tmp_path):
    d = fresh(prepared, tmp_path)
    (d / "meta.json").write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match=r"ds/meta.json holds a list; expected a mapping"):
        PreparedDataset.load(d)
    assert not PreparedDataset.is_complete(d)


def test_edge_ids_out_of_range_or_repeated_are_refused_by_name(tmp_path):
    """Issue 19: e_id is checked like indices: in [0, num_edge_ids), each edge once."""
    from ibp_graph.sampling.hetero import TypedCSC

    indptr, indices = np.array([0, 2, 3]), np.array([1, 0, 1], dtype=np.int32)
    with pytest.raises(ValueError, match=r"e_id must name edges in \[0, num_edge_ids=3\); e_id\[1\]=3"):
        CSCGraph(indptr, indices, np.array([0, 3, 1], dtype=np.int32), 3)
    with pytest.raises(ValueError, match=r"e_id must name edges in \[0, num_edge_ids=3\); e_id\[1\]=3"):
        TypedCSC(indptr, indices, np.array([0, 3, 1], dtype=np.int32), 2, 3)
    for make in (lambda e, n: CSCGraph(indptr, indices, e, n), lambda e, n: TypedCSC(indptr, indices, e, 2, n)):
        for n in (3, 5, None):  # a recorded bound, one above the edge count (edges removed), none recorded
            with pytest.raises(ValueError, match=r"e_id must name every edge once; e_id\[2\]=1 repeats"):
                make(np.array([1, 0, 1], dtype=np.int32), n)
        with pytest.raises(ValueError, match=r"e_id must name edges in ids >= 0; e_id\[0\]=-1"):
            make(np.array([-1, 0, 1], dtype=np.int32), None)
        assert make(np.array([4, 0, 2], dtype=np.int32), 5).num_edges == 3  # distinct ids below the bound
    # from_edge_index records the bound, save/load keep it, and a damaged e_id.npy is named
    g = CSCGraph.from_edge_index(np.array([[1, 0, 1], [0, 0, 1]]), 2)
    assert g.num_edge_ids == 3 and TypedCSC.from_edge_index(np.array([[1, 0], [0, 0]]), 2, 1).num_edge_ids == 2
    g.save(tmp_path / "g")
    assert CSCGraph.load(tmp_path / "g").num_edge_ids == 3
    edit(tmp_path / "g" / "e_id.npy", lambda a: (a.__setitem__(2, 7), a)[1])
    damaged = CSCGraph.load(tmp_path / "g")  # e_id is checked at its first use, not at load
    for use in (damaged.checked_e_id, lambda: NeighborSampler(damaged, [2])):
        with pytest.raises(ValueError, match=r"g is not a valid graph: e_id must name edges in \[0, "
                                             r"num_edge_ids=3\); e_id\[2\]=7"):
            use()
    edit(tmp_path / "g" / "e_id.npy", lambda a: (a.__setitem__(2, a[0]), a)[1])
    out = expect_clean_exit(run_python(LOAD_AND_SAMPLE, tmp_path / "g")).strip()
    assert out.startswith("ERROR ValueError") and "e_id must name every edge once; e_id[2]=" in out


def test_a_prepared_graph_records_its_edge_ids_and_an_e_id_beyond_them_is_refused(prepared, tmp_path):
    """build_csc records how many edge ids e_id draws from (input edges and reverses; dedup keeps the
    ids), so a prepared graph's e_id is range-checked on load like indices (it was only checked for
    repeats: an id beyond the edges reached the batches)."""
    meta = json.loads((prepared / "graph" / "meta.json").read_text())
    graph = CSCGraph.load(prepared / "graph")
    assert graph.num_edge_ids == meta["num_edge_ids"] >= int(graph.e_id.max()) + 1 > graph.num_edges
    d = fresh(prepared, tmp_path)
    edit(d / "graph" / "e_id.npy", lambda a: (a.__setitem__(5, meta["num_edge_ids"]), a)[1])  # no repeat
    with pytest.raises(ValueError, match=rf"graph is not a valid graph: e_id must name edges in \[0, "
                                         rf"num_edge_ids={meta['num_edge_ids']}\); e_id\[5\]={meta['num_edge_ids']}"):
        NeighborSampler(PreparedDataset.load(d, verify="none").graph, [2])


def edit_meta(d, **changes):
    meta = json.loads((d / "meta.json").read_text())
    (d / "meta.json").write_text(json.dumps(dict(meta, **changes)))


@pytest.mark.parametrize("num_classes", [True, 0, -5, 2.5, "10", None])
def test_a_num_classes_that_is_not_an_int_of_at_least_1_is_named(prepared, tmp_path, num_classes):
    d = fresh(prepared, tmp_path)
    edit_meta(d, num_classes=num_classes)
    with pytest.raises(ValueError, match=rf"ds/meta.json: num_classes={num_classes!r} is not accepted; expected an "
                                         r"int >= 1"):
        PreparedDataset.load(d)


@pytest.mark.parametrize("case", ["fewer classes recorded", "int32", "float", "out of range", "below -1"])
def test_labels_of_another_dtype_or_outside_the_classes_are_named(prepared, tmp_path, case):
    d = fresh(prepared, tmp_path)
    if case == "fewer classes recorded":
        edit_meta(d, num_classes=1)
    else:
        edit(d / "y.npy", {"int32": lambda y: y.astype(np.int32), "float": lambda y: y.astype(np.float64),
                           "out of range": lambda y: y + SPEC.num_classes, "below -1": lambda y: y - 1}[case])
    classes = 1 if case == "fewer classes recorded" else SPEC.num_classes
    with pytest.raises(ValueError, match=rf"ds/y.npy must hold int64 classes in \[-1, {classes}\) .*it holds "):
        PreparedDataset.load(d, verify="none")  # the structure check catches them, checksums or not


@pytest.mark.parametrize("case", ["recorded", "file"])
def test_features_of_another_dtype_than_recorded_are_named(prepared, tmp_path, case):
    d = fresh(prepared, tmp_path)
    if case == "recorded":
        edit_meta(d, x_dtype="int8")
    else:
        edit(d / "x.npy", lambda x: x.astype(np.float64))
    with pytest.raises(ValueError, match=r"ds/x.npy holds (float32|float64); meta.json records "
                                         r"x_dtype='(int8|float32)'"):
        PreparedDataset.load(d, verify="none")
    # x.npy not opened: not checked
    assert PreparedDataset.load(d, verify="none", features=False).num_nodes == SPEC.num_nodes


@pytest.mark.parametrize("content", ['{"codec": ', '[1]', '{"codec": 5}'])
def test_a_damaged_store_meta_json_is_named(prepared, tmp_path, content):
    d = fresh(prepared, tmp_path)
    (d / "store" / "x" / "meta.json").write_text(content)
    with pytest.raises(ValueError, match=r"ds/store/x/meta.json(:| is not readable JSON| holds a list)"):
        PreparedDataset.load(d, verify="none").store_codec  # noqa: B018


def test_a_loaded_graphs_edge_ids_are_checked_once_and_only_for_what_reads_them(prepared, monkeypatch):
    """CSCGraph.load maps e_id and leaves its check (every id once, below num_edge_ids: papers100M's 3.2 G ids,
    ~17 s and 13 GB of page cache) to its first reader: a sampler without edge ids never reads it."""
    from ibp_graph.sampling import graph as graph_module

    calls = []
    real = graph_module.check_edge_ids
    monkeypatch.setattr(graph_module, "check_edge_ids", lambda e_id, n: (calls.append(len(e_id)), real(e_id, n)))
    g = PreparedDataset.load(prepared).graph
    seeds = np.arange(0, g.num_nodes, 7)
    without = NeighborSampler(g, [5, 5], edge_ids=False).sample(seeds, seed=1)
    assert calls == [] and without.edge is None
    with_ids = NeighborSampler(g, [5, 5]).sample(seeds, seed=1)
    assert calls == [g.num_edges]
    NeighborSampler(g, [5, 5])  # checked once per graph
    assert calls == [g.num_edges]
    NeighborSampler(g, [2], edge_time=np.arange(g.num_edge_ids))  # its time-ordered copy is a graph made in memory
    assert calls == [g.num_edges] * 2
    for f in ("node", "row", "col"):
        assert torch.equal(getattr(with_ids, f), getattr(without, f)), f
    assert with_ids.edge.shape == with_ids.col.shape
    CSCGraph(g.indptr, g.indices, g.e_id, g.num_edge_ids)  # made in memory: checked at once, as before
    assert calls == [g.num_edges] * 3


@pytest.mark.parametrize("use", ["edge ids", "edge time", "edge weight", "loader with edge ids"])
def test_a_damaged_e_id_is_refused_by_its_first_reader_and_unread_without_edge_ids(prepared, tmp_path, use):
    """A repeated edge id in a prepared folder: the folder opens; whatever reads e_id (edge ids in batches,
    a time or weight per edge) raises naming the folder; batches without edge ids are those of the intact
    folder (they never read it)."""
    from loaders.pyg import CompressedNeighborLoader

    d = fresh(prepared, tmp_path)
    edit(d / "graph" / "e_id.npy", lambda a: (a.__setitem__(3, a[0]), a)[1])
    ds, intact = PreparedDataset.load(d, verify="none"), PreparedDataset.load(prepared)
    g, n = ds.graph, ds.graph.num_edge_ids  # per-edge values: one per edge id (edges dedup removed included)
    read = {"edge ids": lambda: NeighborSampler(g, [3]),
            "edge time": lambda: NeighborSampler(g, [3], edge_time=np.arange(n), edge_ids=False),
            "edge weight": lambda: NeighborSampler(g, [3], weight=np.ones(n, np.float32), edge_ids=False),
            "loader with edge ids": lambda: CompressedNeighborLoader(({"x": ds.x}, g), [3], batch_size=64)}[use]
    with pytest.raises(ValueError, match=r"ds/graph is not a valid graph: e_id must name every edge once; "
                                         r"e_id\[3\]=\d+ repeats"):
        read()

    def batches(dataset):
        loader = CompressedNeighborLoader(({"x": dataset.x}, dataset.graph), [4, 3], batch_size=128,
                                          input_nodes=torch.arange(0, 1000), codec="auto", edge_ids=False)
        torch.manual_seed(0)
        return list(loader)

    for a, b in zip(batches(ds), batches(intact), strict=True):
        assert "e_id" not in a and torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.x.view(torch.int32), b.x.view(torch.int32))


def test_a_damaged_e_id_of_a_heterogeneous_relation_is_named_at_its_first_reader(tmp_path):
    """load_relation defers the e_id check like CSCGraph.load; the error names the edge type's folder."""
    from ibp_graph.data import maggen
    from ibp_graph.data.hetero import HeteroPreparedDataset
    from ibp_graph.sampling.hetero import HeteroNeighborSampler

    spec = maggen.MagSpec(num_papers=300, num_authors=400, num_institutions=10, num_fields=30, num_classes=5)
    d = maggen.generate(spec, tmp_path / "m", progress=False)
    edit(d / "edges" / "author___writes___paper" / "e_id.npy", lambda a: (a.__setitem__(1, a[0]), a)[1])
    ds = HeteroPreparedDataset.load(d, verify="none")
    out = HeteroNeighborSampler(ds.num_nodes_dict, ds.relations, [3, 2], edge_ids=False).sample(
        "paper", np.arange(50), seed=0)
    assert all(e is None for e in out.edge.values())
    with pytest.raises(ValueError, match=r"author___writes___paper is not a valid graph: e_id must name every edge "
                                         r"once; e_id\[1\]=\d+ repeats"):
        HeteroNeighborSampler(ds.num_nodes_dict, ds.relations, [3, 2])


def test_per_edge_times_and_weights_take_one_entry_per_edge_id():
    """e_id indexes them: with num_edge_ids recorded above num_edges (repeated edges removed), an array of
    num_edges entries is refused by name (it used to fail with numpy's IndexError), one per edge id samples."""
    g = CSCGraph(np.array([0, 2, 3]), np.array([1, 0, 1], dtype=np.int32), np.array([4, 0, 2], dtype=np.int32), 5)
    assert g.edge_value_count == 5 and CSCGraph.from_edge_index(np.array([[1, 0], [0, 1]]), 2).edge_value_count == 2
    for kw in ({"edge_time": np.arange(3)}, {"weight": np.ones(3)}):
        name = next(iter(kw))
        with pytest.raises(ValueError, match=rf"{name} has shape \(3,\); accepted: .*shape \(5,\)"):
            NeighborSampler(g, [2], **kw)
    out = NeighborSampler(g, [1], weight=np.array([0, 0, 0, 0, 1.0])).sample(np.array([0]), seed=0)
    assert out.edge.tolist() == [4] and out.node.tolist() == [0, 1]  # only edge id 4 (position 0) weighs
    NeighborSampler(g, [2], edge_time=np.arange(5)).sample(np.array([0, 1]), seed=0, seed_time=np.array([9, 9]))
