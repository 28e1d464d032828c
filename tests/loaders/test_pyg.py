"""CompressedNeighborLoader: PyG semantics, lossless batches, workers, faults, training parity."""
import gc
import os
import signal

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from ibp_graph.codec import EBPCodec, IBPCodec, IdentityCodec, fit_codec
from ibp_graph.loaders.pyg import CompressedNeighborLoader
from ibp_graph.pipeline.requests import BatchRequests


def make_graph(num_nodes=3000, num_edges=30000, dim=24, seed=0):
    """A random graph whose features name their node: x[i] is i (float32, exact below 2**24)."""
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=g)
    x = torch.arange(num_nodes, dtype=torch.float32).unsqueeze(1).repeat(1, dim)
    x[:, 1:] += torch.randn(num_nodes, dim - 1, generator=g) * 0.1  # compressible noise
    y = torch.randint(0, 7, (num_nodes,), generator=g)
    edge_attr = torch.randn(num_edges, 3, generator=g)
    return Data(x=x, y=y, edge_index=edge_index, edge_attr=edge_attr, num_nodes=num_nodes)


def check_batch(batch, data, input_nodes):
    assert torch.equal(batch.x, data.x[batch.n_id])  # bit for bit
    assert torch.equal(batch.x[:, 0].long(), batch.n_id)  # the features name their node
    assert torch.equal(batch.y, data.y[batch.n_id])
    assert torch.equal(batch.n_id[: batch.batch_size], input_nodes[batch.input_id])
    src, dst = batch.n_id[batch.edge_index[0]], batch.n_id[batch.edge_index[1]]
    assert torch.equal(data.edge_index[:, batch.e_id], torch.stack([src, dst]))
    assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
    assert sum(batch.num_sampled_nodes) == batch.n_id.numel()
    assert sum(batch.num_sampled_edges) == batch.e_id.numel()
    assert batch.num_sampled_nodes[0] == batch.batch_size


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_are_exact_and_follow_pyg_semantics(num_workers):
    data = make_graph()
    input_nodes = torch.arange(0, 3000, 3)
    loader = CompressedNeighborLoader(data, [5, 3], input_nodes=input_nodes, batch_size=128,
                                      shuffle=True, num_workers=num_workers)
    seen = []
    for batch in loader:
        check_batch(batch, data, input_nodes)
        assert batch.x.device.type == "cpu"
        seen.append(batch.input_id)
    assert len(seen) == len(loader) == 8
    assert torch.equal(torch.cat(seen).sort().values, torch.arange(1000))  # every seed once
    assert loader.stats.batches == 8
    assert loader.stats.fraction < 1.0
    assert set(loader.stats.sent_bytes) == {"float32[24]", "float32[3]", "int64[*]"}
    assert "sample" in loader.stats.table() and "int64[*]" in str(loader.stats)


def test_ibp_and_identity_give_identical_batches():
    data = make_graph()
    out = {}
    for codec in ("ibp", "identity"):
        torch.manual_seed(42)
        loader = CompressedNeighborLoader(data, [4, 4], batch_size=200, shuffle=True, codec=codec)
        out[codec] = list(loader)
        assert loader.stats.fraction == pytest.approx(1.0, abs=0.02) if codec == "identity" else True
    assert len(out["ibp"]) == len(out["identity"])
    for a, b in zip(out["ibp"], out["identity"]):
        for key in ("x", "y", "n_id", "e_id", "edge_index", "input_id", "edge_attr"):
            assert torch.equal(a[key], b[key]), key
    # another seed samples differently
    torch.manual_seed(7)
    other = next(iter(CompressedNeighborLoader(data, [4, 4], batch_size=200, shuffle=True)))
    assert not torch.equal(other.n_id, out["ibp"][0].n_id)


@pytest.mark.parametrize("codec, num_workers", [("auto", 0), ("ebp", 2)])
def test_auto_and_ebp_batches_are_exact(codec, num_workers):
    data = make_graph()
    input_nodes = torch.arange(0, 3000, 2)
    torch.manual_seed(11)
    loader = CompressedNeighborLoader(data, [5, 3], input_nodes=input_nodes, batch_size=250,
                                      shuffle=True, num_workers=num_workers, codec=codec)
    chosen = {k: type(c) for k, c in loader.codecs.items()}
    assert chosen["int64[*]"] is IBPCodec  # ids: the exact value-range codec, whatever `codec` says
    if codec == "ebp":
        assert chosen["float32[24]"] is EBPCodec and chosen["float32[3]"] is EBPCodec
    else:  # each group gets what fit_codec picks on its sample (all rows here)
        assert loader.codecs["float32[24]"].fingerprint == fit_codec(data.x).fingerprint
        assert loader.codecs["float32[3]"].fingerprint == fit_codec(data.edge_attr).fingerprint
    n = 0
    for batch in loader:
        check_batch(batch, data, input_nodes)
        n += 1
    assert n == len(loader) == 6
    assert loader.stats.fraction < 1.0
    torch.manual_seed(11)
    plain = list(CompressedNeighborLoader(data, [5, 3], input_nodes=input_nodes, batch_size=250,
                                          shuffle=True, codec="identity"))
    torch.manual_seed(11)
    for a, b in zip(plain, loader):  # same sampling, same bits, whatever the codec
        for key in ("x", "n_id", "e_id", "edge_index", "edge_attr"):
            assert torch.equal(a[key], b[key]), key


def test_default_codec_is_auto():
    import inspect

    assert inspect.signature(CompressedNeighborLoader).parameters["codec"].default == "auto"
    data = make_graph(num_nodes=2000, num_edges=10000)
    default = CompressedNeighborLoader(data, [2], batch_size=500)
    auto = CompressedNeighborLoader(data, [2], batch_size=500, codec="auto")
    ibp = CompressedNeighborLoader(data, [2], batch_size=500, codec="ibp")
    fingerprints = {k: c.fingerprint for k, c in default.codecs.items()}
    assert fingerprints == {k: c.fingerprint for k, c in auto.codecs.items()}
    # on these rows EBP beats IBP, so a default of "ibp" would show here
    assert default.codecs["float32[24]"].name == "ebp" and ibp.codecs["float32[24]"].name == "ibp"


def test_random_bit_features_get_identity_through_auto():
    data = make_graph(num_nodes=2000, num_edges=10000)
    g = torch.Generator().manual_seed(4)
    data.x = torch.randint(-2**31, 2**31 - 1, (2000, 24), generator=g, dtype=torch.int32).view(torch.float32)
    loader = CompressedNeighborLoader(data, [3, 2], batch_size=400, shuffle=True, codec="auto")
    assert isinstance(loader.codecs["float32[24]"], IdentityCodec)
    for batch in loader:  # NaN payloads included: compare bits, not values
        assert torch.equal(batch.x.view(torch.int32), data.x[batch.n_id].view(torch.int32))
    assert loader.stats.sent_bytes["float32[24]"] == loader.stats.raw_bytes["float32[24]"]


def test_ebp_codec_reaches_spawned_workers():
    """With the spawn start method the producer and its codecs are pickled into the worker."""
    data = make_graph(num_nodes=1000, num_edges=6000)
    torch.manual_seed(2)
    forked = list(CompressedNeighborLoader(data, [3], batch_size=300, shuffle=True, codec="ebp"))
    torch.manual_seed(2)
    loader = CompressedNeighborLoader(data, [3], batch_size=300, shuffle=True, codec="ebp",
                                      num_workers=1, multiprocessing_context="spawn")
    spawned = list(loader)
    assert len(spawned) == len(forked) == 4
    for a, b in zip(forked, spawned):
        check_batch(b, data, torch.arange(1000))
        assert torch.equal(a.x, b.x) and torch.equal(a.n_id, b.n_id)
    assert isinstance(loader.codecs["float32[24]"], EBPCodec)


def test_fanout_all_and_boolean_mask_input():
    data = make_graph(num_nodes=500, num_edges=3000)
    mask = torch.zeros(500, dtype=torch.bool)
    mask[::5] = True
    loader = CompressedNeighborLoader(data, [-1], input_nodes=mask, batch_size=50)
    for batch in loader:
        check_batch(batch, data, torch.arange(500))  # a mask gives input_id = node ids, as in PyG
        seeds = batch.n_id[: batch.batch_size]
        indeg = torch.bincount(data.edge_index[1], minlength=500)
        assert batch.num_sampled_edges[0] == int(indeg[seeds].sum())


def test_persistent_workers_and_breaking_out_of_an_epoch():
    data = make_graph()
    loader = CompressedNeighborLoader(data, [3], batch_size=100, shuffle=True, num_workers=2,
                                      persistent_workers=True)
    for i, batch in enumerate(loader):
        if i == 2:
            break
    count = 0
    for batch in loader:
        check_batch(batch, data, torch.arange(3000))
        count += 1
    assert count == len(loader) == 30


def test_two_live_iterators_claim_slots_of_their_own_and_every_held_batch_stays_intact():
    # both iterators' workers have ids 0 and 1; interleaved and with every batch held, no batch of
    # one is written over by the other's workers (each iterator's workers claim on a lane of their own)
    data = make_graph()
    loader = CompressedNeighborLoader(data, [3, 2], batch_size=100, shuffle=True, num_workers=2)
    first, second = iter(loader), iter(loader)
    held = [b for pair in zip(first, second) for b in pair]
    assert len(held) == 2 * len(loader) == 60
    for batch in held:
        check_batch(batch, data, torch.arange(3000))
    claims = loader._producer.ring.lanes[:, :2, :, 0]  # [lane, worker, slot]
    assert int(claims[0].sum()) > 0 and int(claims[1].sum()) > 0 and int(claims[2:].abs().sum()) == 0
    del first, second, held
    gc.collect()
    for batch in loader:  # the lanes are free again: a later epoch uses the first one
        check_batch(batch, data, torch.arange(3000))
    assert loader._producer.ring.lane == 0


def test_unsupported_options_raise_naming_them():
    data = make_graph(num_nodes=100, num_edges=500)
    with pytest.raises(ValueError, match="time_attr='t' names neither a node-level"):
        CompressedNeighborLoader(data, [2], time_attr="t")
    with pytest.raises(ValueError, match="input_time is given but time_attr is None"):
        CompressedNeighborLoader(data, [2], input_time=torch.zeros(100))
    with pytest.raises(ValueError, match=r"temporal_strategy='latest' is not accepted; use one of \('uniform', 'last'\)"):
        CompressedNeighborLoader(data, [2], temporal_strategy="latest")
    with pytest.raises(NotImplementedError, match="neighbor_sampler"):
        CompressedNeighborLoader(data, [2], neighbor_sampler=object())
    with pytest.raises(ValueError, match=r"subgraph_type='sideways' is not accepted; use one of "
                                         r"\('directional', 'bidirectional', 'induced'\)"):
        CompressedNeighborLoader(data, [2], subgraph_type="sideways")
    with pytest.raises(ValueError, match="disjoint=True with subgraph_type='induced' is not accepted"):
        CompressedNeighborLoader(data, [2], subgraph_type="induced", disjoint=True)
    with pytest.raises(ValueError, match="filter_per_worker='yes' is not accepted"):
        CompressedNeighborLoader(data, [2], filter_per_worker="yes")
    with pytest.raises(ValueError, match=r"codec='zstd' is not accepted; use one of \('auto', 'ibp', 'ebp', "
                                         r"'identity'\) or a codec object"):
        CompressedNeighborLoader(data, [2], codec="zstd")
    with pytest.raises(IndexError, match="input_nodes contains node 100"):
        CompressedNeighborLoader(data, [2], input_nodes=torch.tensor([1, 100]))
    with pytest.raises(ValueError, match="batch_size=0"):
        CompressedNeighborLoader(data, [2], batch_size=0)
    with pytest.raises(ValueError, match="prefetch=-1"):
        CompressedNeighborLoader(data, [2], prefetch=-1)


class FailingCodec(IBPCodec):
    """Raises (or kills its process) when asked to encode inside a worker."""

    mode = "raise"

    def encode(self, tensor):
        if torch.utils.data.get_worker_info() is not None:
            if self.mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise ValueError("encoder exploded on purpose")
        return super().encode(tensor)


def failing_codec(data, mode):
    base = IBPCodec.fit(data.x)
    codec = FailingCodec.from_state_dict(base.state_dict())
    codec.mode = mode
    return codec


def test_worker_exception_reaches_main_with_traceback():
    data = make_graph(num_nodes=400, num_edges=2000)
    loader = CompressedNeighborLoader(data, [2], batch_size=50, num_workers=1,
                                      codec=failing_codec(data, "raise"))
    with pytest.raises(ValueError, match="encoder exploded on purpose") as info:
        next(iter(loader))
    assert "DataLoader worker process" in str(info.value)
    assert "in encode" in str(info.value)  # the worker's traceback travels with it


def test_killed_worker_gives_clear_error_without_hanging():
    data = make_graph(num_nodes=400, num_edges=2000)
    loader = CompressedNeighborLoader(data, [2], batch_size=50, num_workers=1, timeout=120,
                                      codec=failing_codec(data, "kill"))
    with pytest.raises(RuntimeError, match="worker process died"):
        next(iter(loader))


def _shm_state():
    """This process's shared-memory mappings (torch's segments: /dev/shm files, deleted once
    mapped, or memfds) and open file descriptors. Only this process is counted: the
    machine's /dev/shm also holds other programs' files."""
    with open("/proc/self/maps") as f:
        shm = sum(1 for line in f if "/dev/shm/" in line or "memfd:" in line)
    fds = len(os.listdir("/proc/self/fd"))
    return shm, fds


@pytest.mark.slow
def test_no_shared_memory_leak_over_1000_batches():
    """Three epochs of 350 batches: after the first, this process's shared mappings and open
    descriptors do not grow (a per-batch leak would add hundreds). The first epoch leaves a
    constant few (a second mapping of the ring's counters, torch's last received segment)."""
    data = make_graph(num_nodes=2000, num_edges=10000, dim=8)
    loader = CompressedNeighborLoader(data, [2], batch_size=2, num_workers=2, shuffle=True,
                                      input_nodes=torch.arange(700))
    start = _shm_state()
    states, n = [], 0
    for _ in range(3):
        for batch in loader:
            n += 1
        del batch
        gc.collect()
        states.append(_shm_state())
    assert n == 1050
    (shm1, fds1), _, (shm3, fds3) = states
    assert shm3 <= shm1 <= start[0] + 4 and fds3 <= fds1 + 4, (start, states)


def test_requests_split_across_ranks():
    ranks = [list(BatchRequests(103, 10, shuffle=True, drop_last=False, rank=r, world_size=3))
             for r in range(3)]
    ids = [torch.cat([q.index for q in reqs]) for reqs in ranks]
    assert all(t.numel() == 34 for t in ids)
    joined = torch.cat(ids)
    assert joined.unique().numel() == joined.numel()  # disjoint
    again = list(BatchRequests(103, 10, shuffle=True, drop_last=False, rank=1, world_size=3))
    assert torch.equal(torch.cat([q.index for q in again]), ids[1])  # same order on every call


def _pretend_rank_1_of_2(monkeypatch):
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda *a, **k: 1)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda *a, **k: 2)


@pytest.mark.parametrize("hetero", [False, True])
def test_seeds_are_not_split_under_torch_distributed_unless_asked(monkeypatch, hetero):
    """PyG's loader splits nothing: a DDP script that hands each rank its own seeds gets all of them
    (they were split a second time: half the batches). rank/world_size given: the loader splits."""
    from torch_geometric.data import HeteroData

    _pretend_rank_1_of_2(monkeypatch)
    data = make_graph(num_nodes=400, num_edges=2000, dim=4)
    seeds = torch.arange(0, 400, 3)  # this rank's own share, as the script chose it
    if hetero:
        h = HeteroData()
        h["v"].x = data.x
        h["v", "e", "v"].edge_index = data.edge_index
        data, inputs = h, ("v", seeds)
    else:
        inputs = seeds
    got = lambda loader: torch.cat([(b["v"] if hetero else b).n_id[:b["v"].batch_size if hetero else b.batch_size]
                                    for b in loader])
    mine = got(CompressedNeighborLoader(data, [2], input_nodes=inputs, batch_size=16, shuffle=True))
    assert torch.equal(mine.sort().values, seeds)
    split = got(CompressedNeighborLoader(data, [2], input_nodes=inputs, batch_size=16, shuffle=True,
                                         rank=1, world_size=2))
    assert split.numel() == seeds.numel() // 2 and bool(torch.isin(split, seeds).all())


def train_losses(codec, epochs=2):
    from torch_geometric.nn import SAGEConv

    data = make_graph(num_nodes=1500, num_edges=12000, dim=16, seed=3)
    data.x = data.x / 1500.0
    torch.manual_seed(0)

    class SAGE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = SAGEConv(16, 32)
            self.c2 = SAGEConv(32, 7)

        def forward(self, x, edge_index):
            return self.c2(self.c1(x, edge_index).relu(), edge_index)

    model = SAGE()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = CompressedNeighborLoader(data, [5, 5], batch_size=150, shuffle=True, codec=codec)
    losses = []
    for _ in range(epochs):
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[: batch.batch_size]
            loss = torch.nn.functional.cross_entropy(out, batch.y[: batch.batch_size])
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


def test_training_losses_identical_with_and_without_compression():
    torch.use_deterministic_algorithms(True)
    try:
        with_ibp = train_losses("ibp")
        without = train_losses("identity")
    finally:
        torch.use_deterministic_algorithms(False)
    assert len(with_ibp) == 20
    assert with_ibp == without  # exactly, not approximately
    assert np.mean(with_ibp[-5:]) < np.mean(with_ibp[:5])  # it does learn something


def test_pre_encoded_store_gives_the_same_batches_without_encoding():
    from ibp_graph.data.store import EncodedTable
    from ibp_graph.sampling.graph import CSCGraph

    data = make_graph()
    table = EncodedTable.encode(data.x)
    torch.manual_seed(3)
    plain = list(CompressedNeighborLoader(data, [4, 2], batch_size=300, shuffle=True))
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes)
    for source in ((({"x": table, "y": data.y}), graph),
                   Data(x=table, y=data.y, edge_index=data.edge_index, edge_attr=data.edge_attr,
                        num_nodes=data.num_nodes)):
        torch.manual_seed(3)
        loader = CompressedNeighborLoader(source, [4, 2], batch_size=300, shuffle=True, num_workers=1)
        stored = list(loader)
        assert len(stored) == len(plain)
        for a, b in zip(plain, stored):
            for key in ("x", "y", "n_id", "e_id", "edge_index", "input_id"):
                assert torch.equal(a[key], b[key]), key
        assert "x@store" in loader.stats.sent_bytes
        assert loader.codecs["x@store"] is table.codec


def test_a_graph_with_uint32_edge_ids_above_2_31_gives_them_in_batches():
    """A prepared graph of more than 2**31 edge ids keeps e_id as uint32 (edge_id_dtype): batches carry its ids
    as int64, unchanged (no sign wrap), with the int32 graph's nodes, edges and features."""
    from ibp_graph.sampling.graph import CSCGraph

    data = make_graph()
    graph = CSCGraph.from_edge_index(data.edge_index, data.num_nodes)
    high = CSCGraph(graph.indptr, graph.indices, (graph.e_id.astype(np.int64) + 2**31).astype(np.uint32))
    runs = []
    for g in (graph, high):
        torch.manual_seed(5)
        runs.append(list(CompressedNeighborLoader(({"x": data.x, "y": data.y}, g), [4, 2], batch_size=300,
                                                  shuffle=True, num_workers=1)))
    assert len(runs[0]) == len(runs[1]) > 1
    for a, b in zip(*runs):
        for key in ("x", "y", "n_id", "edge_index", "input_id"):
            assert torch.equal(a[key], b[key]), key
        assert b.e_id.dtype == torch.int64 and torch.equal(b.e_id, a.e_id + 2**31)


@pytest.mark.parametrize("store_codec", ["ebp", "auto"])
def test_ebp_encoded_store_gives_the_same_batches(store_codec):
    from ibp_graph.data.store import EncodedTable

    data = make_graph()
    table = EncodedTable.encode(data.x, store_codec)
    assert isinstance(table.codec, EBPCodec)  # auto picks EBP on these rows too
    torch.manual_seed(8)
    plain = list(CompressedNeighborLoader(data, [4, 2], batch_size=500, shuffle=True, codec="identity"))
    data.x = table
    torch.manual_seed(8)
    loader = CompressedNeighborLoader(data, [4, 2], batch_size=500, shuffle=True, num_workers=1)
    stored = list(loader)
    assert len(stored) == len(plain) == 6
    for a, b in zip(plain, stored):
        for key in ("x", "y", "n_id", "e_id", "edge_index"):
            assert torch.equal(a[key], b[key]), key
    assert loader.codecs["x@store"] is table.codec
    assert loader.stats.sent_bytes["x@store"] < 0.95 * loader.stats.raw_bytes["x@store"]


def test_bad_feature_store_input():
    from ibp_graph.sampling.graph import CSCGraph

    data = make_graph(num_nodes=100, num_edges=400)
    graph = CSCGraph.from_edge_index(data.edge_index, 100)
    with pytest.raises(ValueError, match=r"features\['x'\] has 99 rows; the graph has 100 nodes"):
        CompressedNeighborLoader(({"x": data.x[:99]}, graph), [2])
    with pytest.raises(TypeError, match=r"features\['x'\] must be a tensor or an EncodedTable"):
        CompressedNeighborLoader(({"x": [1, 2]}, graph), [2])
    with pytest.raises(TypeError, match="data must be a torch_geometric.data.Data"):
        CompressedNeighborLoader("graph.pt", [2])


_KILL_SCRIPT = r"""
import multiprocessing as mp, os, signal, sys, time
import torch
from tests.loaders.test_pyg import make_graph
from ibp_graph.loaders.pyg import CompressedNeighborLoader

data = make_graph(num_nodes=3000, num_edges=30000, dim=64)
for delay in (0.0, 0.002, 0.02, 0.2):
    loader = CompressedNeighborLoader(data, [5, 5], batch_size=64, num_workers=2, timeout=60)
    it = iter(loader)
    next(it)
    try:
        for victim in mp.active_children():
            os.kill(victim.pid, signal.SIGKILL)
            break
        time.sleep(delay)
        for _ in it:
            pass
        print("OUTCOME no error", flush=True)
    except BaseException as e:
        print("OUTCOME", type(e).__name__, str(e).splitlines()[0], flush=True)
    del it, loader
"""


def test_a_worker_killed_by_a_signal_gives_the_loaders_message_naming_it():
    """SIGKILL a worker mid-epoch, at several moments: always the loader's RuntimeError naming
    the signal (never a bare ConnectionResetError); in a subprocess, so a hang fails the test."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", _KILL_SCRIPT], capture_output=True, text=True, timeout=600,
                       cwd=root)
    outcomes = [line for line in r.stdout.splitlines() if line.startswith("OUTCOME")]
    assert len(outcomes) == 4, r.stdout[-2000:] + r.stderr[-3000:]
    for line in outcomes:
        assert line.startswith("OUTCOME RuntimeError CompressedNeighborLoader: a worker process died while "
                               "sampling, gathering or encoding a batch (pid "), line
        assert "killed by signal SIGKILL" in line, line


def test_rank_and_world_size_are_loader_arguments():
    data = make_graph(num_nodes=600, num_edges=4000)
    g = torch.Generator
    parts = [list(CompressedNeighborLoader(data, [2], batch_size=100, shuffle=True, rank=r, world_size=3,
                                           generator=g().manual_seed(4))) for r in range(3)]
    seeds = [torch.cat([b.n_id[: b.batch_size] for b in p]) for p in parts]
    assert [s.numel() for s in seeds] == [200, 200, 200]
    assert torch.equal(torch.cat(seeds).sort().values, torch.arange(600))  # disjoint and covering
    for p in parts:
        for b in p:
            check_batch(b, data, torch.arange(600))
    with pytest.raises(ValueError, match="rank=3 is not accepted"):
        CompressedNeighborLoader(data, [2], rank=3, world_size=3)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_input_id_follows_pyg_for_masks_and_ids(num_workers):
    """PyG's get_input_nodes: a boolean mask gives input_id = the seeds' node ids
    (mask.nonzero()); node ids (or None) give positions into input_nodes."""
    data = make_graph()
    mask = torch.zeros(data.num_nodes, dtype=torch.bool)
    mask[torch.arange(5, 3000, 7)] = True
    ids = mask.nonzero().view(-1)
    for given, expect_ids in ((mask, True), (ids, False)):
        loader = CompressedNeighborLoader(data, [4], input_nodes=given, batch_size=64, shuffle=True,
                                          num_workers=num_workers, codec="ibp")
        seen = []
        for batch in loader:
            seeds = batch.n_id[: batch.batch_size]
            assert torch.equal(seeds, batch.input_id if expect_ids else ids[batch.input_id])
            seen.append(batch.input_id)
        everything = torch.cat(seen).sort().values
        assert torch.equal(everything, ids if expect_ids else torch.arange(ids.numel()))


@pytest.mark.parametrize("hetero", [False, True])
@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.float64, torch.bool])
def test_given_input_id_keeps_its_dtype_as_pyg(dtype, hetero):
    """PyG only indexes a given input_id: a batch's is input_id[positions], in the dtype it was given;
    one of another shape is refused naming it."""
    from torch_geometric.data import HeteroData

    data = make_graph(300, 1000)
    if hetero:
        data = HeteroData({"paper": {"x": data.x}, ("paper", "cites", "paper"): {"edge_index": data.edge_index}})
    ids = (torch.arange(300) % 3 == 0) if dtype == torch.bool else (torch.arange(300) * 7).to(dtype)
    kw = dict(input_nodes="paper") if hetero else {}
    loader = CompressedNeighborLoader(data, [3], input_id=ids, batch_size=64, shuffle=True, device="cpu", **kw)
    seen = []
    for batch in loader:
        store = batch["paper"] if hetero else batch
        positions = store.n_id[:store.batch_size]  # the input nodes are every node, in order
        assert store.input_id.dtype == dtype and torch.equal(store.input_id, ids[positions])
        seen.append(positions)
    assert torch.equal(torch.cat(seen).sort().values, torch.arange(300))
    with pytest.raises(ValueError, match=r"input_id has shape \(300, 1\); accepted: one id per input node, "
                                         r"shape \(300,\)"):
        CompressedNeighborLoader(data, [3], input_id=ids.view(-1, 1), device="cpu", **kw)


def test_repr_is_pyg_s_and_the_sampler_is_node_sampler():
    """print(loader) gives PyG's NodeLoader repr (DataLoader's own `sampler` attribute holds the
    batch requests; the neighbour sampler is `node_sampler`, PyG's name for it)."""
    loader = CompressedNeighborLoader(make_graph(300, 1000), [3, 2], batch_size=10, codec="identity")
    assert repr(loader) == str(loader) == "CompressedNeighborLoader()"
    assert loader.node_sampler.num_neighbors == [3, 2]


@pytest.mark.parametrize("hetero", [False, True])
def test_same_generator_same_batches_with_or_without_persistent_workers(hetero):
    """What the README promises: with `generator=` every epoch's batches are the same with
    persistent_workers True or False and without workers (torch's own worker-seed draws, made
    from torch's global RNG at every epoch without persistent workers, never touch it)."""
    from torch_geometric.data import HeteroData

    data = make_graph(num_nodes=300, num_edges=2000, dim=4)
    if hetero:
        h = HeteroData()
        h["v"].x = data.x
        h["v", "e", "v"].edge_index = data.edge_index
        data, kw = h, dict(input_nodes=("v", None))
    else:
        kw = {}

    def epochs(**options):
        loader = CompressedNeighborLoader(data, [3, 2], batch_size=64, shuffle=True,
                                          generator=torch.Generator().manual_seed(7), **kw, **options)
        out = []
        for epoch in range(3):
            torch.manual_seed(epoch)  # the global RNG moves differently in each setting
            out.append([(b["v"] if hetero else b).n_id.tolist() for b in loader])
        return out

    persistent = epochs(num_workers=1, persistent_workers=True)
    assert persistent[0] != persistent[1]  # a new shuffle each epoch
    assert epochs(num_workers=1, persistent_workers=False) == persistent
    assert epochs(num_workers=0) == persistent


@pytest.mark.parametrize("empty", [[], ()], ids=["list", "NumNeighbors"])
def test_no_hop_gives_batches_of_the_seeds_alone_as_pyg(empty):
    """num_neighbors=[] (PyG: zero hops; relbench's loaders, PyG's *_link_neighbor_loader_no_edges tests): every
    batch holds the seeds alone, their rows, no edge, one count of sampled nodes and none of edges; the link loader
    the endpoints of its edges (it was refused: "a non-empty list")."""
    from torch_geometric.sampler.base import NumNeighbors

    from ibp_graph.loaders.pyg import CompressedLinkNeighborLoader

    data = make_graph(num_nodes=300, num_edges=2000, dim=8)
    fanouts = NumNeighbors([]) if isinstance(empty, tuple) else []
    seen = torch.zeros(300, dtype=torch.bool)
    for b in CompressedNeighborLoader(data, num_neighbors=fanouts, batch_size=64, shuffle=True):
        assert torch.equal(b.n_id[:b.batch_size], b.n_id) and b.edge_index.shape == (2, 0) and b.e_id.numel() == 0
        assert torch.equal(b.x, data.x[b.n_id]) and b.num_sampled_nodes == [b.batch_size] and b.num_sampled_edges == []
        seen[b.n_id] = True
    assert bool(seen.all())
    label_index = torch.randint(0, 100, (2, 100), generator=torch.Generator().manual_seed(0))
    for b in CompressedLinkNeighborLoader(Data(num_nodes=100), num_neighbors=fanouts, batch_size=20,
                                          edge_label_index=label_index):  # PyG's test_homo_link_..._no_edges
        assert b.input_id.numel() == 20 and b.edge_label_index.size(1) == 20 and b.edge_index.shape == (2, 0)
        assert b.num_nodes == b.edge_label_index.unique().numel()
        assert torch.equal(b.n_id[b.edge_label_index], label_index[:, b.input_id])
    from torch_geometric.data import HeteroData

    hetero = HeteroData()
    hetero["paper"].num_nodes, hetero["author"].num_nodes = 100, 80
    by_type = torch.stack([label_index[0], label_index[1] % 80])
    for b in CompressedLinkNeighborLoader(hetero, num_neighbors=fanouts, batch_size=20,
                                          edge_label_index=(("paper", "author"), by_type)):  # PyG's hetero one
        store = b["paper", "to", "author"]
        assert store.input_id.numel() == 20 and store.edge_label_index.size(1) == 20
        assert b["paper"].num_nodes == store.edge_label_index[0].unique().numel()
        assert b["author"].num_nodes == store.edge_label_index[1].unique().numel()


def test_pygs_num_neighbors_object_samples_as_its_list():
    """PyG's loaders take num_neighbors as a list or as a NumNeighbors (its sampler wraps a list in one and
    reads get_values() for a Data); the node and link loaders give the same batches either way."""
    from torch_geometric.sampler.base import NumNeighbors

    from ibp_graph.loaders.pyg import CompressedLinkNeighborLoader

    data = make_graph(num_nodes=400, num_edges=3000, dim=8)
    for cls, kw in ((CompressedNeighborLoader, {}), (CompressedLinkNeighborLoader, {"neg_sampling": "binary"})):
        batches = []
        for fanouts in ([4, 2], NumNeighbors([4, 2])):
            loader = cls(data, num_neighbors=fanouts, batch_size=64, shuffle=True, codec="identity",
                         generator=torch.Generator().manual_seed(3), **kw)
            batches.append(list(loader))
        assert len(batches[0]) == len(batches[1]) > 1
        for a, b in zip(*batches):
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a.keys()
                                                if isinstance(a[k], torch.Tensor)), cls.__name__
            assert a.num_sampled_nodes == b.num_sampled_nodes
    with pytest.raises(ValueError, match="num_neighbors must be a list of ints >= -1"):
        CompressedNeighborLoader(data, num_neighbors=5, batch_size=64)
    for per_type in ({("n", "to", "n"): [2]}, NumNeighbors({("n", "to", "n"): [2]})):  # a dict is for HeteroData
        with pytest.raises(ValueError, match=r"^num_neighbors=\{\('n', 'to', 'n'\): \[2\]\} is not accepted for a "
                                             r"homogeneous graph .*accepted: a list of ints >= -1, one per hop$"):
            CompressedNeighborLoader(data, num_neighbors=per_type, batch_size=64)
