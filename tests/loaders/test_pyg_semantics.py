"""One CompressedNeighborLoader for Data and HeteroData (a NeighborLoader either way), and PyG's
reading of the loader's data: user attributes named like the sampler's outputs keep their values,
attributes deleted, replaced or added after construction reach the next epoch's batches."""
import pytest
import torch
from torch_geometric.loader import NeighborLoader

from ibp_graph.loaders.pyg import CompressedNeighborLoader
from tests.loaders.test_pyg import make_graph
from tests.loaders.test_pyg_hetero import CITES, make_hetero


def loader(data, **kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("batch_size", 32)
    return CompressedNeighborLoader(data, **kw)


def test_a_hetero_data_gets_a_neighbor_loader_of_the_one_class():
    data = make_hetero(papers=200, authors=300, insts=10)
    hetero = loader(data, num_neighbors=[2], input_nodes="paper")
    homo = loader(make_graph(num_nodes=200, num_edges=1000), num_neighbors=[2])
    for it in (hetero, homo):
        assert isinstance(it, NeighborLoader) and type(it) is CompressedNeighborLoader
        assert repr(it) == "CompressedNeighborLoader()"


@pytest.mark.parametrize("num_workers", [0, 2])
def test_user_n_id_and_e_id_keep_their_values_as_in_pyg(num_workers):
    data = make_graph(num_nodes=400, num_edges=3000)
    data.n_id = torch.arange(400) * 3
    data.e_id = torch.arange(3000) * 5
    for batch in loader(data, num_neighbors=[3, 2], num_workers=num_workers):
        assert torch.equal(batch.n_id, batch.x[:, 0].long() * 3)  # the user's values, gathered
        src = batch.n_id[batch.edge_index[0]] // 3
        assert torch.equal(data.edge_index[0, batch.e_id // 5], src)  # the user's e_id, gathered
        assert torch.equal(batch.e_id % 5, torch.zeros_like(batch.e_id))


def test_user_n_id_is_kept_with_zero_copy_features():
    data = make_graph(num_nodes=400, num_edges=3000)
    data.n_id = torch.arange(400) * 3
    for batch in loader(data, num_neighbors=[3], features="zero_copy"):
        assert torch.equal(batch.x[:, 0].long() * 3, batch.n_id)  # x served by the sampled ids


def test_hetero_user_n_id_keeps_its_values_as_in_pyg():
    data = make_hetero(papers=200, authors=300, insts=10)
    data["paper"].n_id = torch.arange(200) * 3
    for batch in loader(data, num_neighbors=[3, 2], input_nodes="paper"):
        assert torch.equal(batch["paper"].n_id, batch["paper"].x[:, 0].long() * 3)
        assert torch.equal(batch["author"].n_id, batch["author"].x[:, 0].long())


@pytest.mark.parametrize("num_workers", [0, 2])
def test_attributes_deleted_replaced_or_added_after_construction_reach_the_next_epoch(num_workers):
    data = make_graph(num_nodes=400, num_edges=3000)
    it = loader(data, num_neighbors=[3], num_workers=num_workers)
    assert "x" in next(iter(it))
    del it.data.x
    it.data.y = it.data.y.double() * 2  # replaced: another dtype
    it.data.z = torch.arange(400, dtype=torch.int16).unsqueeze(1).repeat(1, 3)  # added
    for batch in it:
        assert "x" not in batch
        assert torch.equal(batch.y, data.y[batch.n_id]) and batch.y.dtype == torch.float64
        assert torch.equal(batch.z, data.z[batch.n_id])


def test_hetero_attributes_deleted_or_added_after_construction_reach_the_next_epoch():
    data = make_hetero(papers=200, authors=300, insts=10)
    it = loader(data, num_neighbors=[3, 2], input_nodes="paper")
    assert "x" in next(iter(it))["author"]
    del it.data["author"].x
    it.data["paper"].x = it.data["paper"].x.half()
    it.data["inst"].x = torch.arange(10, dtype=torch.float32).unsqueeze(1)
    it.data[CITES].w = torch.arange(data[CITES].num_edges)
    for batch in it:
        assert "x" not in batch["author"]
        assert torch.equal(batch["paper"].x, data["paper"].x[batch["paper"].n_id])
        assert batch["paper"].x.dtype == torch.float16
        assert torch.equal(batch["inst"].x[:, 0].long(), batch["inst"].n_id)
        assert torch.equal(batch[CITES].w, batch[CITES].e_id)


def _no_edges(seen):
    """A transform_sampler_output that records what it got and drops every sampled edge."""
    def transform(out):
        seen.append(type(out))
        empty = torch.empty(0, dtype=torch.int64)
        if isinstance(out.row, dict):
            out.row, out.col = {e: empty for e in out.row}, {e: empty for e in out.col}
            out.edge = {e: empty for e in out.edge}
        else:
            out.row, out.col, out.edge = empty, empty, empty
        return out
    return transform


def test_transform_sampler_output_is_applied_to_pyg_s_sampler_output_for_both_graph_kinds():
    from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput

    seen = []
    for batch in loader(make_graph(num_nodes=200, num_edges=1000), num_neighbors=[3],
                        transform_sampler_output=_no_edges(seen)):
        assert batch.edge_index.shape == (2, 0) and batch.e_id.numel() == 0 and batch.edge_attr.shape == (0, 3)
    assert seen and set(seen) == {SamplerOutput}
    seen.clear()
    for batch in loader(make_hetero(papers=200, authors=300, insts=10), num_neighbors=[3], input_nodes="paper",
                        transform_sampler_output=_no_edges(seen)):
        assert batch[CITES].edge_index.shape == (2, 0)
    assert seen and set(seen) == {HeteroSamplerOutput}



@pytest.mark.parametrize("case", ["homo", "homo timed", "hetero"])
def test_transform_sampler_output_gets_pygs_node_metadata_and_the_batch_takes_its_edits(case):
    """PyG's node_sample puts (input_id, seed_time) on out.metadata, and NodeLoader.filter_fn reads the batch's
    input_id, seed_time and batch_size from the metadata the transform leaves."""
    hetero, timed = case == "hetero", case.endswith("timed")
    data = make_hetero(papers=200, authors=300, insts=10) if hetero else make_graph(num_nodes=200, num_edges=1000)
    kw = dict(num_neighbors=[3], input_id=torch.arange(200) + 1000, shuffle=True)
    if hetero:
        kw["input_nodes"] = "paper"
    if timed:
        data.time = torch.randint(0, 100, (200,), generator=torch.Generator().manual_seed(1))
        kw.update(time_attr="time", input_time=torch.arange(200) % 50 + 60)
    seen = []

    def record(out):
        seen.append(out.metadata)
        return out

    def edit(out):  # half the seeds' ids, doubled and reversed; later times
        input_id, seed_time = out.metadata
        k = (input_id.numel() + 1) // 2
        out.metadata = (input_id[:k].flip(0) * 2, None if seed_time is None else seed_time[:k].flip(0) + 7)
        return out

    def batches(**more):
        torch.manual_seed(0)
        return [b["paper"] if hetero else b for b in loader(data, **kw, **more)]

    ref = batches()
    assert len(batches(transform_sampler_output=record)) == len(ref) == len(seen)
    for md, b in zip(seen, ref):
        assert len(md) == 2 and torch.equal(md[0], b.input_id)
        assert torch.equal(md[1], b.seed_time) if timed else md[1] is None and "seed_time" not in b
    for a, b in zip(batches(transform_sampler_output=edit), ref):
        k = (b.input_id.numel() + 1) // 2
        assert torch.equal(a.input_id, b.input_id[:k].flip(0) * 2) and a.batch_size == k
        assert torch.equal(a.seed_time, b.seed_time[:k].flip(0) + 7) if timed else "seed_time" not in a
        assert torch.equal(a.n_id, b.n_id)  # the subgraph is the same

@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("hetero", [False, True])
def test_a_transform_giving_sampled_ids_another_dtype_is_served_as_in_pyg(hetero, num_workers):
    """PyG's filter_data indexes with the ids the transform leaves, in their dtype; groups of dtypes the set-up
    did not see (int32 ids) travel as identity, named in the stats."""
    data = make_hetero(papers=200, authors=300, insts=10) if hetero else make_graph(num_nodes=200, num_edges=1000)
    kw = dict(num_neighbors=[3, 2], shuffle=True, num_workers=num_workers, **({"input_nodes": "paper"} if hetero else {}))

    def narrow(out):
        def to(v, dtype):
            return {k: t.to(dtype) for k, t in v.items()} if isinstance(v, dict) else v.to(dtype)
        out.node, out.edge = to(out.node, torch.int32), to(out.edge, torch.int32)
        return out

    def batches(**more):
        torch.manual_seed(0)
        it = loader(data, **kw, **more)
        return list(it), it

    ref, _ = batches()
    got, it = batches(transform_sampler_output=narrow)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        for t in (b.node_types if hetero else [None]):
            x, y = (a, b) if t is None else (a[t], b[t])
            assert x.n_id.dtype == torch.int32 and torch.equal(x.n_id.long(), y.n_id)
            assert "x" not in y or torch.equal(x.x, y.x)
        for e in (b.edge_types if hetero else [None]):
            x, y = (a, b) if e is None else (a[e], b[e])
            assert x.e_id.dtype == torch.int32 and torch.equal(x.e_id.long(), y.e_id)
            assert torch.equal(x.edge_index, y.edge_index)
    assert it.stats.codecs["int32[*]"] == "identity (a group the set-up did not see)"


def test_sampler_and_batch_sampler_order_the_seeds_for_both_graph_kinds():
    from torch.utils.data import BatchSampler, SequentialSampler

    order = [5, 0, 99, 3]
    homo = loader(make_graph(num_nodes=200, num_edges=1000), num_neighbors=[2], sampler=order, batch_size=2)
    hetero = loader(make_hetero(papers=200, authors=300, insts=10), num_neighbors=[2], input_nodes="paper",
                    sampler=order, batch_size=2)
    assert [b.n_id[: b.batch_size].tolist() for b in homo] == [[5, 0], [99, 3]]
    assert [b["paper"].n_id[: b["paper"].batch_size].tolist() for b in hetero] == [[5, 0], [99, 3]]
    hetero = loader(make_hetero(papers=200, authors=300, insts=10), num_neighbors=[2], input_nodes="paper",
                    batch_sampler=BatchSampler(SequentialSampler(range(200)), 48, False), batch_size=1)
    assert [b["paper"].batch_size for b in hetero] == [48, 48, 48, 48, 8]

