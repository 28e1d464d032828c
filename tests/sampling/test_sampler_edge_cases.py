"""Edge cases of the samplers' inputs: dtypes numpy or numba cannot take as they come, values that wrap when
cast, and arguments one sampler refuses while the other ignored them. Each must give a clear error naming the
argument (or sample as its homogeneous twin does), never a numba crash or a silently different sample."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ibp_graph.sampling import CSCGraph, NeighborSampler
from ibp_graph.sampling.graph import TypedCSC, sorted_by_time
from ibp_graph.sampling.hetero import HeteroNeighborSampler

BUYS = ("user", "buys", "item")
NUM_NODES = {"user": 3, "item": 2}
# user -> item edges; each item's in-edges in time order for the times below
EDGES = torch.tensor([[0, 1, 2, 0], [0, 0, 1, 1]])
USER_TIME = np.array([1.0, 2.0, 3.0])
ITEM_TIME = np.array([2.5, 5.0])


def _hetero(**kw) -> HeteroNeighborSampler:
    key = USER_TIME[EDGES[0].numpy()]
    graph = TypedCSC.from_edge_index(EDGES, 3, 2, time=key)
    return HeteroNeighborSampler(NUM_NODES, {BUYS: graph}, [-1], **kw)


def _as_lists(out):
    return ({t: v.tolist() for t, v in out.node.items()}, {e: v.tolist() for e, v in out.row.items()},
            {e: v.tolist() for e, v in out.col.items()})


@pytest.mark.parametrize("level", ["node", "edge"])
def test_hetero_half_precision_times_sample_like_float64_ones(level):
    """PyG's HeteroData may hold time_attr as float16; the homogeneous sampler converts it, the typed one
    handed it to numba, which raised NotImplementedError('float16') at the first batch."""
    def times(dtype):
        if level == "node":
            return dict(node_time={"user": USER_TIME.astype(dtype), "item": ITEM_TIME.astype(dtype)})
        return dict(edge_time={BUYS: USER_TIME[EDGES[0].numpy()].astype(dtype)})

    seeds, seed_time = torch.tensor([0, 1]), torch.tensor([2.0, 2.5])
    want = _as_lists(_hetero(**times(np.float64)).sample("item", seeds, seed=0, seed_time=seed_time))
    got = _as_lists(_hetero(**times(np.float16)).sample("item", seeds, seed=0, seed_time=seed_time))
    assert got == want
    if level == "node":  # as torch tensors too (a HeteroData's time_attr)
        half = {"user": torch.from_numpy(USER_TIME).half(), "item": torch.from_numpy(ITEM_TIME).half()}
        assert _as_lists(_hetero(node_time=half).sample("item", seeds, seed=0, seed_time=seed_time)) == want


@pytest.mark.parametrize("level", ["node", "edge"])
def test_hetero_nan_times_are_refused_as_the_homogeneous_sampler_refuses_them(level):
    """NeighborSampler refuses NaN times (they compare false with every seed time); the typed sampler took them
    and sampled as if the node or edge never existed."""
    bad = USER_TIME.copy()
    bad[1] = np.nan
    graph = CSCGraph.from_edge_index(torch.tensor([[1, 2], [0, 0]]), 3)
    with pytest.raises(ValueError, match=f"{level}_time holds NaN"):
        NeighborSampler(graph, [-1], **{f"{level}_time": bad if level == "node" else bad[1:]})
    kw = dict(node_time={"user": bad, "item": ITEM_TIME}) if level == "node" else \
        dict(edge_time={BUYS: bad[EDGES[0].numpy()]})
    with pytest.raises(ValueError, match=rf"{level}_time\[.*holds NaN"):
        _hetero(**kw)


def test_bfloat16_weights_and_times_are_taken_or_refused_by_name():
    """torch's bfloat16 has no numpy dtype: weights and times in it raised torch's 'Got unsupported ScalarType
    BFloat16', naming no argument. They are real values: sampled as their float32 values."""
    graph = CSCGraph.from_edge_index(torch.tensor([[1, 2, 0], [0, 0, 1]]), 3)
    seeds = torch.tensor([0, 1])
    w = torch.tensor([1.0, 3.0, 2.0])
    want = NeighborSampler(graph, [1], weight=w).sample(seeds, seed=3)
    got = NeighborSampler(graph, [1], weight=w.bfloat16()).sample(seeds, seed=3)
    assert torch.equal(got.node, want.node) and torch.equal(got.edge, want.edge)
    t = torch.tensor([1.0, 2.0, 3.0])
    want = NeighborSampler(graph, [-1], node_time=t).sample(seeds, seed=0, seed_time=torch.tensor([2.0, 9.0]))
    got = NeighborSampler(graph, [-1], node_time=t.bfloat16()).sample(
        seeds, seed=0, seed_time=torch.tensor([2.0, 9.0]).bfloat16())
    assert torch.equal(got.node, want.node) and torch.equal(got.edge, want.edge)
    typed = _hetero(node_time={"user": torch.from_numpy(USER_TIME).bfloat16(),
                               "item": torch.from_numpy(ITEM_TIME).bfloat16()})
    assert _as_lists(typed.sample("item", seeds, seed=0)) == _as_lists(
        _hetero(node_time={"user": USER_TIME, "item": ITEM_TIME}).sample("item", seeds, seed=0))


def test_hetero_seed_time_without_times_is_refused_as_the_homogeneous_sampler_refuses_it():
    """NeighborSampler.sample refuses seed_time when it has no node or edge times; the typed sampler ignored it
    and returned a sample that does not respect the times the caller gave."""
    graph = CSCGraph.from_edge_index(torch.tensor([[1, 2], [0, 0]]), 3)
    with pytest.raises(ValueError, match="seed_time is given but the sampler has no node_time or edge_time"):
        NeighborSampler(graph, [-1]).sample(torch.tensor([0]), seed=0, seed_time=torch.tensor([1]))
    with pytest.raises(ValueError, match="seed_time is given but the sampler has no node_time or edge_time"):
        _hetero().sample("item", torch.tensor([0]), seed=0, seed_time=torch.tensor([1]))
    with pytest.raises(ValueError, match="seed_time is given but the sampler has no node_time or edge_time"):
        _hetero().sample(None, {"item": torch.tensor([0])}, seed=0, seed_time={"item": torch.tensor([1])})
    _hetero().sample("item", torch.tensor([0]), seed=0, seed_time=None)  # None stays accepted


@pytest.mark.parametrize("name", ["indptr", "indices", "e_id"])
def test_non_native_byte_order_arrays_are_refused_by_name(name):
    """A big-endian '>i8' array (a .npy written on another machine, or by another tool) has dtype name 'int64'
    and passed the dtype check; numba then failed with a TypingError from index_checks."""
    arrays = dict(indptr=np.array([0, 1, 3]), indices=np.array([1, 0, 1]), e_id=np.array([0, 1, 2]))
    arrays[name] = arrays[name].astype(arrays[name].dtype.newbyteorder(">"))
    with pytest.raises(TypeError, match=rf"{name} must be a 1-d numpy array of .*native byte order"):
        CSCGraph(**arrays)
    with pytest.raises(TypeError, match=rf"{name} must be a 1-d numpy array of .*native byte order"):
        TypedCSC(**arrays, num_src=2)


def test_non_native_byte_order_graph_files_are_refused_by_load(tmp_path):
    CSCGraph.from_edge_index(torch.tensor([[0, 1, 1], [1, 0, 1]]), 2).save(tmp_path)
    np.save(tmp_path / "indptr.npy", np.load(tmp_path / "indptr.npy").astype(">i8"))
    with pytest.raises(ValueError, match="is not a valid graph: indptr must be .*native byte order"):
        CSCGraph.load(tmp_path)


def test_uint64_ids_beyond_int64_are_named_by_their_value():
    """An id of 2**63 + 1 given as uint64 was reported as -9223372036854775807 (its int64 wrap)."""
    graph = CSCGraph.from_edge_index(torch.tensor([[1, 2], [0, 0]]), 3)
    big = 2 ** 63 + 1
    with pytest.raises(ValueError, match=f"seeds contains node id {big}, outside the valid range"):
        NeighborSampler(graph, [1]).sample(np.array([0, big], dtype=np.uint64), seed=0)
    with pytest.raises(ValueError, match=rf"edge_index\[0\] contains source node id {big}, outside"):
        CSCGraph.from_edge_index(np.array([[0, big], [1, 0]], dtype=np.uint64), 2)
    with pytest.raises(ValueError, match=f"'item' node id {big}, outside"):
        _hetero().sample("item", np.array([big], dtype=np.uint64), seed=0)
    # uint64 ids in range still sample like int64 ones
    a = NeighborSampler(graph, [1]).sample(np.array([0, 2], dtype=np.uint64), seed=5)
    b = NeighborSampler(graph, [1]).sample(np.array([0, 2]), seed=5)
    assert torch.equal(a.node, b.node) and torch.equal(a.edge, b.edge)


def test_sorted_by_time_names_a_key_of_the_wrong_length():
    """numpy's lexsort said 'all keys need to be the same shape', naming neither the key nor the edge count."""
    graph = CSCGraph.from_edge_index(torch.tensor([[1, 2, 0], [0, 0, 1]]), 3)
    with pytest.raises(ValueError, match=r"key has shape \(2,\); accepted: one value per CSC position, shape \(3,\)"):
        sorted_by_time(graph, np.arange(2))
    assert sorted_by_time(graph, np.array([2, 1, 0])).indices.tolist() == [2, 1, 0]


def test_uint64_times_beyond_int64_are_refused_not_wrapped():
    """Times are compared as int64: a uint64 time of 2**63 + 5 wrapped to a negative one (always allowed)."""
    graph = CSCGraph.from_edge_index(torch.tensor([[1, 2], [0, 0]]), 3)
    big = 2 ** 63 + 5
    with pytest.raises(ValueError, match=f"node_time holds {big}; accepted: integer times below 2"):
        NeighborSampler(graph, [-1], node_time=np.array([0, 1, big], dtype=np.uint64))
    with pytest.raises(ValueError, match=rf"node_time\['user'\] holds {big}; accepted"):
        _hetero(node_time={"user": np.array([0, 1, big], dtype=np.uint64), "item": ITEM_TIME})
    out = NeighborSampler(graph, [-1], node_time=np.array([0, 1, 2], dtype=np.uint64)).sample(
        torch.tensor([0]), seed=0, seed_time=torch.tensor([1]))
    assert out.node.tolist() == [0, 1]


def test_from_edge_index_checks_time_where_it_is_given():
    """TypedCSC.from_edge_index sorted by any array numpy could sort (booleans, strings, NaN, uint64 beyond
    int64); the sampler refused such times only later, far from this call, or never. They are checked here,
    as the samplers check times, naming the argument."""
    ei = torch.tensor([[0, 1, 2, 0], [0, 0, 1, 1]])
    with pytest.raises(TypeError, match=r"^time has dtype bool; accepted: a real \(float or integer\) dtype"):
        TypedCSC.from_edge_index(ei, 3, 2, time=np.array([True, False, True, False]))
    with pytest.raises(TypeError, match=r"^time has dtype <U1; accepted: a real"):
        TypedCSC.from_edge_index(ei, 3, 2, time=np.array(list("dcba")))
    with pytest.raises(ValueError, match=r"^time holds NaN; accepted: comparable times"):
        TypedCSC.from_edge_index(ei, 3, 2, time=np.array([1.0, np.nan, 0.0, 2.0]))
    big = 2 ** 63 + 5
    with pytest.raises(ValueError, match=rf"^time holds {big}; accepted: integer times below 2\*\*63"):
        TypedCSC.from_edge_index(ei, 3, 2, time=np.array([0, big, 1, 2], dtype=np.uint64))
    with pytest.raises(ValueError, match=r"^time has shape \(3,\); accepted: one value per edge, shape \(4,\)"):
        TypedCSC.from_edge_index(ei, 3, 2, time=np.arange(3))
    # integer and float times of any width, arrays or tensors, order the edges as their float64 values do
    want = TypedCSC.from_edge_index(ei, 3, 2, time=np.array([5.0, 1.0, 3.0, 2.0]))
    assert want.indices.tolist() == [1, 0, 0, 2] and want.e_id.tolist() == [1, 0, 3, 2]
    for time in (np.array([5, 1, 3, 2], dtype=np.uint8), np.array([5, 1, 3, 2], dtype=np.float16),
                 torch.tensor([5, 1, 3, 2], dtype=torch.int32), torch.tensor([5.0, 1.0, 3.0, 2.0]).bfloat16()):
        got = TypedCSC.from_edge_index(ei, 3, 2, time=time)
        assert got.indices.tolist() == want.indices.tolist() and got.e_id.tolist() == want.e_id.tolist(), time


def _held_bytes(make) -> tuple[int, object]:
    """Bytes numpy (and Python) still hold once `make()` returned, and what it returned."""
    import gc
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        made = make()
        gc.collect()
        return tracemalloc.get_traced_memory()[0], made
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("ids", ["held", "positional"])
@pytest.mark.parametrize("level", ["node", "edge"])
def test_a_temporal_sampler_without_edge_ids_holds_no_edge_id_per_edge(ids, level):
    """NeighborSampler sorts the graph by time when it is built; with edge_ids=False it kept the sorted graph's
    e_id (one id per edge: sorted_by_time gathers it, or makes it for positional ids) though nothing reads it.
    It now holds no array of edge ids, and samples as with them."""
    rng = np.random.default_rng(4)
    n, m = 1000, 200_000
    g = CSCGraph.from_edge_index(torch.from_numpy(np.stack([rng.integers(0, n, m), rng.integers(0, n, m)])), n)
    if ids == "positional":  # edge ids are CSC positions (PyG's adj_t): held nowhere
        g = CSCGraph(g.indptr, g.indices, None)
    times = {f"{level}_time": rng.integers(0, 100, n if level == "node" else m)}
    NeighborSampler(g, [3], edge_ids=False, **times)  # kernels compiled or loaded outside the count
    with_ids, a = _held_bytes(lambda: NeighborSampler(g, [3, 2], **times))
    without, b = _held_bytes(lambda: NeighborSampler(g, [3, 2], edge_ids=False, **times))
    assert with_ids - without >= 0.9 * m * np.dtype(g.e_id_dtype).itemsize, (with_ids, without)
    seeds, seed_time = torch.arange(0, n, 9), dict(seed_time=torch.full((len(range(0, n, 9)),), 60))
    x, y = a.sample(seeds, seed=2, **seed_time), b.sample(seeds, seed=2, **seed_time)
    assert x.edge.numel() > 0 and y.edge is None
    assert torch.equal(x.node, y.node) and torch.equal(x.row, y.row) and torch.equal(x.col, y.col)
    assert torch.equal(x.batch, y.batch) and x.num_sampled_edges == y.num_sampled_edges
