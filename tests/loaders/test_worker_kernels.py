"""A loader compiles every kernel its workers run before it forks them.

A forked worker that compiles a numba kernel, or loads one from numba's cache, runs LLVM, which registers
the code's unwind tables under a libgcc lock. A worker forked while another thread of its parent held that
lock (a thread exiting, e.g. the previous iterator's queue feeder) waits for it forever: a loader benchmark
hung at its second loader about once in six runs, its worker stuck in ``__register_frame_info_bases``. So a
loader built with workers produces one batch itself with the workers' (serial) kernels, and after that,
producing its batches as a worker does must compile nothing.

Each case runs in a fresh interpreter: kernels compiled by other tests in this process would hide one the
warm-up missed. The DGL loader's case is in tests/loaders/test_dgl_options.py (it needs .venv-dgl).
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

#: run in a fresh interpreter: builds the loader `LOADER` (num_workers=1), then produces its batches as a
#: worker does, printing the kernels numba compiled or loaded meanwhile (none expected).
SCRIPT = """
import torch
from torch_geometric.data import Data, HeteroData
from ibp_graph.data.store import EncodedTable
from ibp_graph.loaders.pyg import CompressedLinkNeighborLoader, CompressedNeighborLoader
from ibp_graph.pipeline.requests import BatchRequest
from tests.loaders.worker_kernels import compiled_as_a_worker

g = torch.Generator().manual_seed(0)
n, e = 400, 3000
edge_index = torch.randint(0, n, (2, e), generator=g)
data = Data(x=torch.randn(n, 24, generator=g), y=torch.randint(0, 5, (n,), generator=g), edge_index=edge_index,
            edge_attr=torch.randn(e, 3, generator=g).half(), num_nodes=n)
hetero = HeteroData()
hetero["paper"].x = torch.randn(n, 16, generator=g)
hetero["author"].x = torch.randn(n // 2, 16, generator=g).double()
hetero["author", "writes", "paper"].edge_index = torch.stack([torch.randint(0, n // 2, (e,), generator=g),
                                                              torch.randint(0, n, (e,), generator=g)])
hetero["paper", "cites", "paper"].edge_index = edge_index
loader = {LOADER}
assert loader.num_workers == 1


def batches():
    for i, size in enumerate((1, 7, 64, 300)):
        loader._producer[BatchRequest(index=torch.randperm(len(loader._producer), generator=g)[:size], seed=i)]


print("compiled in the worker:", compiled_as_a_worker(batches))
"""

LOADERS = {
    "raw features, ibp": "CompressedNeighborLoader(data, [5, 3], batch_size=32, num_workers=1, codec='ibp')",
    "raw features, auto, without edge ids": (
        "CompressedNeighborLoader(Data(x=data.x, y=data.y, edge_index=edge_index), [5, 3], batch_size=32, "
        "num_workers=1, edge_ids=False)"),
    "a pre-encoded store (ebp), identity": (
        "CompressedNeighborLoader(Data(x=EncodedTable.encode(data.x, 'ebp', progress=False), y=data.y, "
        "edge_index=edge_index), [5, 3], batch_size=32, num_workers=1, codec='identity')"),
    "heterogeneous, auto": "CompressedNeighborLoader(hetero, [4, 2], input_nodes='paper', batch_size=32, num_workers=1)",
    "links, binary negatives": (
        "CompressedLinkNeighborLoader(data, [5, 3], batch_size=32, num_workers=1, neg_sampling='binary')"),
}


@pytest.mark.parametrize("name", list(LOADERS))
def test_producing_batches_as_a_worker_compiles_nothing_the_loader_did_not(name):
    script = textwrap.dedent(SCRIPT).replace("{LOADER}", LOADERS[name])
    got = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-3000:]
    assert got.stdout.strip().splitlines()[-1] == "compiled in the worker: []", got.stdout[-2000:]
