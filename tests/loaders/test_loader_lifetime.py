"""A dropped PyG loader is freed by reference counting, and its workers stop at once when it is freed in
a cycle (tests/loaders/lifetime.py); its collate_fn, held weakly by the DataLoader, still pickles into
spawned workers; copies of a loader iterate."""
import gc
import pickle

import pytest
import torch

from ibp_graph.pipeline.requests import BatchRequest
from ibp_graph.loaders.pyg import CompressedLinkNeighborLoader, CompressedNeighborLoader
from tests.loaders.lifetime import (check_exit_is_quiet, check_freed_by_refcount,
                                    check_workers_stop_when_freed_in_a_cycle)
from tests.loaders.test_pyg import make_graph
from tests.loaders.test_pyg_hetero import make_hetero


def _node_homo(**kw):
    return CompressedNeighborLoader(make_graph(num_nodes=600, num_edges=4000), [4, 2], batch_size=100, **kw)


def _node_hetero(**kw):
    return CompressedNeighborLoader(make_hetero(), [4, 2], input_nodes="paper", batch_size=100, **kw)


def _link_homo(**kw):
    data = make_graph(num_nodes=600, num_edges=4000)
    return CompressedLinkNeighborLoader(data, [4, 2], edge_label_index=data.edge_index[:, :500], batch_size=100,
                                        **kw)


@pytest.mark.parametrize("make", [_node_homo, _node_hetero, _link_homo], ids=["node", "hetero", "link"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_dropped_loader_is_freed_without_the_cyclic_collector(make, num_workers):
    check_freed_by_refcount(make, num_workers)


@pytest.mark.parametrize("make", [_node_homo, _node_hetero, _link_homo], ids=["node", "hetero", "link"])
def test_workers_stop_at_once_when_the_loader_is_freed_in_a_cycle(make):
    check_workers_stop_when_freed_in_a_cycle(make)


def test_collate_fn_pickles_as_the_loaders_method_and_names_a_freed_loader():
    loader = _node_homo()
    request = BatchRequest(index=torch.arange(10), seed=7)
    batch = loader.collate_fn(request)
    held = pickle.loads(pickle.dumps(loader))  # what a spawned worker receives
    for key in ("n_id", "e_id", "x", "edge_index"):
        assert torch.equal(held.collate_fn(request)[key], batch[key])
    collate, kind = loader.collate_fn, loader._kind
    del loader
    gc.collect()
    with pytest.raises(RuntimeError, match="collate_fn called after its loader was freed"):
        collate(request)
    with pytest.raises(RuntimeError, match="its loader was freed"):
        kind.loader


def test_copies_of_a_loader_give_its_batches():
    import copy

    loader = _node_homo()
    request = BatchRequest(index=torch.arange(10), seed=3)
    batch = loader.collate_fn(request)
    for other in (copy.copy(loader), copy.deepcopy(loader)):
        assert torch.equal(other.collate_fn(request).n_id, batch.n_id)
        assert next(iter(other)).batch_size == 100
    assert loader._kind.loader is loader  # a shallow copy shares the kind, which still serves the original


def test_exit_with_open_iterators_is_quiet():
    check_exit_is_quiet("""
        import torch
        from torch_geometric.data import Data
        from ibp_graph.loaders.pyg import CompressedNeighborLoader
        data = Data(x=torch.randn(2000, 16), edge_index=torch.randint(0, 2000, (2, 10000)), num_nodes=2000)
        for w in (0, 2):
            globals()[f"loader{w}"] = loader = CompressedNeighborLoader(
                data, [5, 5], batch_size=256, num_workers=w, persistent_workers=w > 0)
            globals()[f"it{w}"] = it = iter(loader)
            next(it)
        print("exiting")
    """)
