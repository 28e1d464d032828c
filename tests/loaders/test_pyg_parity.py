"""CompressedNeighborLoader against PyG's NeighborLoader semantics (torch_geometric.loader's
filter_data, index_select, to_csc and mixins): graph-level attributes, numpy and memmap
features, graphs without edges, CPU affinity and worker threads."""
import numpy as np
import psutil
import pytest
import torch
from torch_geometric.data import Data

from ibp_graph.loaders.pyg import CompressedNeighborLoader
from tests.loaders.test_pyg import check_batch, make_graph


def test_graph_level_attributes_are_kept_unchanged_in_every_batch():
    """PyG's filter_data copies the Data and replaces only node- and edge-level attributes."""
    data = make_graph(num_nodes=400, num_edges=2000)
    data.name = "g"
    data.graph_feat = torch.randn(1, 5)  # [1, k]: neither node- nor edge-level
    data.scale = 2.5
    data.count = torch.tensor(7)  # 0-d
    data.tags = ["a", "b"]
    loader = CompressedNeighborLoader(data, [3, 2], batch_size=64, codec="auto", device="cpu")
    n = 0
    for batch in loader:
        check_batch(batch, data, torch.arange(400))
        assert batch.name == "g" and batch.scale == 2.5 and batch.tags == ["a", "b"]
        assert batch.graph_feat is data.graph_feat and batch.count is data.count
        assert batch.num_nodes == batch.n_id.numel()  # PyG: num_nodes becomes the batch's node count
        n += 1
    assert n == len(loader) == 7


@pytest.mark.parametrize("num_workers", [0, 2])
def test_numpy_and_memmap_features_are_gathered_without_a_copy(tmp_path, num_workers):
    num_nodes, dim = 600, 16
    rng = np.random.default_rng(0)
    values = rng.standard_normal((num_nodes, dim)).astype(np.float32)
    values[:, 0] = np.arange(num_nodes)
    path = tmp_path / "x.f32"
    mm = np.memmap(path, dtype=np.float32, mode="w+", shape=(num_nodes, dim))
    mm[:] = values
    mm.flush()
    x = np.memmap(path, dtype=np.float32, mode="r", shape=(num_nodes, dim))
    y = rng.integers(0, 5, num_nodes)  # a plain int64 ndarray
    edge_index = torch.randint(0, num_nodes, (2, 4000), generator=torch.Generator().manual_seed(1))
    data = Data(x=x, y=y, edge_index=edge_index, num_nodes=num_nodes)
    loader = CompressedNeighborLoader(data, [4, 2], batch_size=100, shuffle=True, num_workers=num_workers,
                                      device="cpu")
    # the loader's table (its feature source's tensor) is a view of the file's mapping, not a copy of it
    table = loader.dataset.planner.node_attrs[None]["x"].tensor  # the one node type (None)
    assert isinstance(table, torch.Tensor) and table.data_ptr() == x.ctypes.data
    n = 0
    for batch in loader:
        assert isinstance(batch.x, torch.Tensor) and batch.x.dtype == torch.float32
        expected = torch.from_numpy(np.take(values, batch.n_id.numpy(), axis=0))  # PyG's index_select
        assert torch.equal(batch.x.view(torch.int32), expected.view(torch.int32))  # bit for bit
        assert torch.equal(batch.y, torch.from_numpy(y)[batch.n_id])
        n += 1
    assert n == 6
    assert "float32[16]" in loader.stats.sent_bytes


def test_numpy_features_torch_cannot_view_are_refused_naming_them():
    data = Data(x=np.array([["a"], ["b"], ["c"]]), edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=3)
    with pytest.raises(TypeError, match=r"data\.x .*<U1"):
        CompressedNeighborLoader(data, [2], device="cpu")


def test_edge_attributes_may_be_numpy():
    data = make_graph(num_nodes=300, num_edges=1500)
    edge_attr = data.edge_attr.numpy().copy()
    data.edge_attr = edge_attr
    for batch in CompressedNeighborLoader(data, [3], batch_size=100, device="cpu"):
        assert torch.equal(batch.edge_attr, torch.from_numpy(edge_attr)[batch.e_id])


@pytest.mark.parametrize("edges", ["missing", "empty"])
def test_a_graph_without_edges_gives_batches_of_the_seeds_only(edges):
    """PyG's to_csc gives an empty graph when edge_index is missing; sampling yields the seeds."""
    x = torch.randn(50, 4)
    data = Data(x=x, num_nodes=50) if edges == "missing" else \
        Data(x=x, edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=50)
    input_nodes = torch.arange(0, 50, 2)
    loader = CompressedNeighborLoader(data, [3, 2], input_nodes=input_nodes, batch_size=10, device="cpu")
    batches = list(loader)
    assert len(batches) == 3
    for batch in batches:
        seeds = input_nodes[batch.input_id]
        assert torch.equal(batch.n_id, seeds)
        assert batch.edge_index.shape == (2, 0) and batch.e_id.numel() == 0
        assert torch.equal(batch.x, x[seeds])
        assert batch.num_sampled_nodes == [seeds.numel(), 0, 0]
        assert batch.num_sampled_edges == [0, 0]


def test_enable_cpu_affinity_pins_workers_as_pyg_does():
    data = make_graph(num_nodes=200, num_edges=1000)
    loader = CompressedNeighborLoader(data, [2], batch_size=100, num_workers=1, device="cpu")
    core = psutil.Process().cpu_affinity()[-1]
    seen = []
    with loader.enable_cpu_affinity(loader_cores=[core]):
        assert loader.loader_cores == [core]
        for batch in loader:
            check_batch(batch, data, torch.arange(200))
            seen.append(batch)
    assert len(seen) == 2
    with pytest.raises(ValueError, match="number of loader cores"):
        with loader.enable_cpu_affinity(loader_cores=[0, 1]):
            pass
    in_main = CompressedNeighborLoader(data, [2], batch_size=100, device="cpu")
    with pytest.raises(ValueError, match="at least one worker"):
        with in_main.enable_cpu_affinity():
            pass


def test_enable_cpu_affinity_sets_the_workers_cores():
    """The affinity is set inside the worker (psutil), before any batch."""
    data = make_graph(num_nodes=200, num_edges=1000)
    core = psutil.Process().cpu_affinity()[0]

    def report(worker_id):  # the user's worker_init_fn runs after the pinning (PyG chains them)
        raise RuntimeError(f"worker {worker_id} pinned to {psutil.Process().cpu_affinity()}")

    loader = CompressedNeighborLoader(data, [2], batch_size=100, num_workers=1, device="cpu",
                                      worker_init_fn=report)
    with loader.enable_cpu_affinity(loader_cores=[core]):
        with pytest.raises(RuntimeError, match=rf"pinned to \[{core}\]"):
            list(loader)


def test_enable_multithreading_follows_pyg():
    data = make_graph(num_nodes=200, num_edges=1000)
    with pytest.raises(ValueError, match="at least one worker"):
        with CompressedNeighborLoader(data, [2], batch_size=100, device="cpu").enable_multithreading(1):
            pass
    loader = CompressedNeighborLoader(data, [2], batch_size=100, num_workers=1, device="cpu")
    if torch.multiprocessing.get_context()._name != "spawn":
        with pytest.raises(ValueError, match="'spawn' multiprocessing context"):
            with loader.enable_multithreading(1):
                pass


def _report_threads(worker_id):
    raise RuntimeError(f"worker {worker_id} runs {torch.get_num_threads()} torch threads")


def test_enable_multithreading_sets_the_spawned_workers_threads():
    data = make_graph(num_nodes=200, num_edges=1000)
    previous = torch.multiprocessing.get_start_method(allow_none=True)
    torch.multiprocessing.set_start_method("spawn", force=True)  # PyG requires it as the default
    try:
        loader = CompressedNeighborLoader(data, [2], batch_size=100, num_workers=1, device="cpu")
        with loader.enable_multithreading(1):
            batches = list(loader)
        assert len(batches) == 2
        for batch in batches:
            check_batch(batch, data, torch.arange(200))
        threads = 2 if torch.get_num_threads() >= 2 else 1
        loader = CompressedNeighborLoader(data, [2], batch_size=100, num_workers=1, device="cpu",
                                          worker_init_fn=_report_threads)
        with loader.enable_multithreading(threads):
            with pytest.raises(RuntimeError, match=f"worker 0 runs {threads} torch threads"):
                list(loader)
    finally:
        torch.multiprocessing.set_start_method(previous, force=True)


def _sorted_by_destination(data: Data) -> Data:
    """The graph without repeated edges, in (destination, source) order, as ToSparseTensor stores it."""
    src, dst = data.edge_index
    key = torch.unique(dst * data.num_nodes + src)  # sorted; ToSparseTensor would sum repeated edges
    out = Data(x=data.x, edge_index=torch.stack([key % data.num_nodes, key // data.num_nodes]))
    out.edge_weight = torch.rand(key.numel(), generator=torch.Generator().manual_seed(5))
    return out


@pytest.mark.parametrize("layout", ["csr", "coo"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_adj_t_is_sampled_as_pyg_reads_it_and_batches_carry_adj_t(layout, num_workers):
    """T.ToSparseTensor's adj_t (a torch sparse tensor where torch_sparse is absent): the graph is
    adj_t's CSR read as CSC (PyG's to_csc), every batch has the sampled subgraph's adj_t with the
    edges' values and no edge_index, never the whole graph's adj_t (it was: empty edge_index)."""
    import torch_geometric.transforms as T

    plain = _sorted_by_destination(make_graph(num_nodes=500, num_edges=4000, dim=6, seed=2))
    sparse = T.ToSparseTensor(attr="edge_weight", layout=torch.sparse_csr)(plain.clone())
    if layout == "coo":
        sparse.adj_t = sparse.adj_t.to_sparse_coo()
    assert "edge_index" not in sparse and sparse.adj_t.layout != torch.strided
    kw = dict(batch_size=32, shuffle=True, num_workers=num_workers)
    ref = CompressedNeighborLoader(plain, [4, 3], generator=torch.Generator().manual_seed(1), **kw)
    got = CompressedNeighborLoader(sparse, [4, 3], generator=torch.Generator().manual_seed(1), **kw)
    n_batches = 0
    for a, b in zip(ref, got):
        n_batches += 1
        n = b.n_id.numel()
        assert "edge_index" not in b and b.adj_t.layout == torch.sparse_csr and tuple(b.adj_t.shape) == (n, n)
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.x, b.x) and a.batch_size == b.batch_size
        coo = b.adj_t.to_sparse_coo().coalesce()
        dst, src = coo.indices()
        got_edges = sorted(zip(src.tolist(), dst.tolist(), coo.values().tolist()))
        want = sorted(zip(a.edge_index[0].tolist(), a.edge_index[1].tolist(), a.edge_weight.tolist()))
        assert got_edges == want
        assert torch.equal(b.e_id.sort().values, a.e_id.sort().values)  # positions in adj_t's order
        assert b.num_sampled_edges == a.num_sampled_edges
    assert n_batches == len(ref) == len(got)


def test_adj_t_of_the_wrong_shape_or_kind_is_refused_by_name():
    data = Data(x=torch.randn(5, 2), adj_t=torch.eye(4).to_sparse_csr())
    with pytest.raises(ValueError, match=r"data.adj_t has shape \(4, 4\); accepted: .*\(5, 5\)"):
        CompressedNeighborLoader(data, [2], batch_size=2)
    data = Data(x=torch.randn(5, 2), adj_t=torch.eye(5))
    with pytest.raises(TypeError, match="data.adj_t is a Tensor of layout torch.strided; accepted: a torch sparse"):
        CompressedNeighborLoader(data, [2], batch_size=2)


@pytest.mark.parametrize("hetero", [False, True], ids=["Data", "HeteroData"])
def test_adj_t_costs_no_memory_for_edge_ids(hetero):
    """adj_t's edge ids are its CSR positions: the loader holds no per-edge id array (it held 4 bytes per edge
    more, an arange; a heterogeneous edge type also went through a 16-byte-per-edge edge_index and a sort).
    What stays is the int32 copy of the sources, 4 bytes per edge (numpy's allocations, by tracemalloc)."""
    import tracemalloc

    from torch_geometric.data import HeteroData

    n, e = 1000, 1_000_000
    g = torch.Generator().manual_seed(0)
    dst = torch.sort(torch.randint(0, n, (e,), generator=g)).values
    src = torch.randint(0, n, (e,), generator=g)
    adj_t = torch.sparse_csr_tensor(torch.searchsorted(dst, torch.arange(n + 1)), src, torch.ones(e), size=(n, n))
    if hetero:
        data, kw = HeteroData(), dict(input_nodes=("a", None))
        data["a"].x, data["a", "to", "a"].adj_t = torch.randn(n, 4), adj_t
    else:
        data, kw = Data(x=torch.randn(n, 4), adj_t=adj_t), {}
    CompressedNeighborLoader(data, [2], batch_size=8, **kw)  # kernels compiled and imports done before counting
    tracemalloc.start()
    try:
        loader = CompressedNeighborLoader(data, [2], batch_size=8, **kw)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert 4 * e <= held < 5 * e, held / e
    batch = next(iter(loader))
    edges = batch["a", "to", "a"] if hetero else batch
    assert edges.e_id.numel() > 0 and bool((edges.e_id < e).all())
    coo = edges.adj_t.to_sparse_coo().coalesce()  # every sampled edge is the adj_t entry its id names
    n_id = batch["a"].n_id if hetero else batch.n_id
    rows, cols = coo.indices()
    got = sorted(zip(n_id[rows].tolist(), n_id[cols].tolist()))
    assert got == sorted(zip(dst[edges.e_id].tolist(), src[edges.e_id].tolist()))


def test_adj_t_naming_nodes_outside_the_graph_is_refused_by_name():
    """An adj_t built without torch's invariant checks, a column outside the graph: refused naming data.adj_t
    (data[edge type].adj_t), not the sampler's arrays."""
    from torch_geometric.data import HeteroData

    bad = torch.sparse_csr_tensor(torch.tensor([0, 1, 2, 2, 2, 2]), torch.tensor([1, 7]), torch.ones(2),
                                  size=(5, 5), check_invariants=False)
    with pytest.raises(ValueError, match=r"data.adj_t: indices must name nodes in \[0, num_nodes=5\); indices\[1\]=7"):
        CompressedNeighborLoader(Data(x=torch.randn(5, 2), adj_t=bad), [2], batch_size=2)
    data = HeteroData()
    data["a"].x, data["a", "to", "a"].adj_t = torch.randn(5, 2), bad
    with pytest.raises(ValueError, match=r"data\[\('a', 'to', 'a'\)\].adj_t: indices must name source nodes in "
                                         r"\[0, num_src=5\); indices\[1\]=7"):
        CompressedNeighborLoader(data, [2], batch_size=2, input_nodes=("a", None))


def test_heterogeneous_adj_t_is_sampled_as_its_edge_index():
    """An edge type given as adj_t (T.ToSparseTensor on HeteroData) samples as the same edges given as
    edge_index, and its batches carry the sampled adj_t (it was refused)."""
    from torch_geometric.data import HeteroData
    import torch_geometric.transforms as T

    g = _sorted_by_destination(make_graph(num_nodes=300, num_edges=2400, dim=4, seed=4))
    plain = HeteroData()
    plain["a"].x = g.x
    plain["a", "to", "a"].edge_index = g.edge_index
    plain["a", "to", "a"].edge_weight = g.edge_weight
    sparse = T.ToSparseTensor(attr="edge_weight", layout=torch.sparse_csr)(plain.clone())
    e = ("a", "to", "a")
    kw = dict(batch_size=20, input_nodes=("a", None), shuffle=True)
    ref = CompressedNeighborLoader(plain, [3, 2], generator=torch.Generator().manual_seed(3), **kw)
    got = CompressedNeighborLoader(sparse, [3, 2], generator=torch.Generator().manual_seed(3), **kw)
    for a, b in zip(ref, got):
        n = b["a"].n_id.numel()
        assert "edge_index" not in b[e] and tuple(b[e].adj_t.shape) == (n, n)
        assert torch.equal(a["a"].n_id, b["a"].n_id) and torch.equal(a["a"].x, b["a"].x)
        coo = b[e].adj_t.to_sparse_coo().coalesce()
        dst, src = coo.indices()
        assert sorted(zip(src.tolist(), dst.tolist(), coo.values().tolist())) == \
            sorted(zip(a[e].edge_index[0].tolist(), a[e].edge_index[1].tolist(), a[e].edge_weight.tolist()))
