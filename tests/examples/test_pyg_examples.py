"""PyG's example scripts as a user runs them, shortened: only the loader import is swapped.

Each test is our own short, deterministic version of one of PyG's example loops (written from
their documented behaviour, on the generated stand-ins of tests/examples/graphs.py): it must
train (losses fall, accuracy beats chance), and lossless compression must not change a single
loss (codec auto and identity give the same numbers bit for bit). A regression in the loader's
plumbing (rows, seeds, edges, per-hop counts, DDP seed handling) shows as a failure here.
"""
from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from ibp_graph.loaders.pyg import CompressedNeighborLoader as NeighborLoader
from tests.examples import graphs


def _epochs(model, loader, num_seeds: int, epochs: int, forward, target) -> list[float]:
    """Mean training loss per epoch (the examples' `train()`)."""
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(epochs):
        model.train()
        total = 0.0
        for batch in loader:
            opt.zero_grad()
            out, y = forward(model, batch), target(batch)
            loss = F.cross_entropy(out, y)
            loss.backward()
            opt.step()
            total += float(loss) * y.numel()
        losses.append(total / num_seeds)
    return losses


@torch.no_grad()
def _accuracy(model, loader, forward, target) -> float:
    model.eval()
    right = seen = 0
    for batch in loader:
        pred, y = forward(model, batch).argmax(dim=-1), target(batch)
        right += int((pred == y).sum())
        seen += y.numel()
    return right / seen


def _ogbn_train(codec: str, num_workers: int):
    """examples/ogbn_train.py (sage): NeighborLoader over the train ids, GraphSAGE, eval on the val ids."""
    from torch_geometric.nn.models import GraphSAGE

    data = graphs.homogeneous()
    train_idx, val_idx = data.train_mask.nonzero().view(-1), data.val_mask.nonzero().view(-1)
    torch.manual_seed(12345)
    kw = dict(num_neighbors=[5, 3], batch_size=64, num_workers=num_workers,
              persistent_workers=num_workers > 0, codec=codec)
    train_loader = NeighborLoader(data, input_nodes=train_idx, shuffle=True, **kw)
    val_loader = NeighborLoader(data, input_nodes=val_idx, shuffle=False, **kw)
    model = GraphSAGE(data.num_features, 32, num_layers=2, out_channels=4, dropout=0.1)
    forward = lambda m, b: m(b.x, b.edge_index)[: b.batch_size]
    target = lambda b: b.y[: b.batch_size].view(-1)
    losses = _epochs(model, train_loader, train_idx.numel(), 4, forward, target)
    return losses, _accuracy(model, val_loader, forward, target)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_ogbn_train_sage_learns_and_compression_changes_no_loss(num_workers):
    auto, acc = _ogbn_train("auto", num_workers)
    identity, acc_identity = _ogbn_train("identity", num_workers)
    assert auto == identity and acc == acc_identity  # bit-exact features: the same numbers
    assert auto[-1] < 0.8 * auto[0] and acc > 0.5, (auto, acc)  # 4 classes: chance is 0.25


class _HeteroGNN(torch.nn.Module):
    """to_hetero_mag.py's model: lazy SAGEConvs, made heterogeneous by to_hetero."""

    def __init__(self, hidden: int, out: int):
        from torch_geometric.nn import SAGEConv

        super().__init__()
        self.conv1 = SAGEConv((-1, -1), hidden)
        self.conv2 = SAGEConv((-1, -1), out)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def _to_hetero_mag(codec: str):
    from torch_geometric.nn import to_hetero

    data = graphs.mag()
    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=[5, 3], batch_size=48, shuffle=True,
                            input_nodes=("paper", data["paper"].train_mask), codec=codec)
    model = to_hetero(_HeteroGNN(32, 4), data.metadata(), aggr="sum")
    with torch.no_grad():  # initialise the lazy modules, as the example does
        batch = next(iter(loader))
        model(batch.x_dict, batch.edge_index_dict)
    forward = lambda m, b: m(b.x_dict, b.edge_index_dict)["paper"][: b["paper"].batch_size]
    target = lambda b: b["paper"].y[: b["paper"].batch_size]
    losses = _epochs(model, loader, int(data["paper"].train_mask.sum()), 4, forward, target)
    return losses, _accuracy(model, loader, forward, target)


def test_to_hetero_mag_learns_and_compression_changes_no_loss():
    auto, acc = _to_hetero_mag("auto")
    identity, acc_identity = _to_hetero_mag("identity")
    assert auto == identity and acc == acc_identity
    assert auto[-1] < 0.8 * auto[0] and acc > 0.5, (auto, acc)


def test_hierarchical_sampling_trims_to_the_same_seed_outputs():
    """examples/hierarchical_sampling.py: BasicGNN's trim_to_layer with the batch's per-hop counts
    gives the seeds the outputs of the untrimmed forward (wrong counts would drop needed edges)."""
    from torch_geometric.nn.models import GraphSAGE

    data = graphs.homogeneous(num_nodes=500)
    torch.manual_seed(1)
    model = GraphSAGE(data.num_features, 32, num_layers=3, out_channels=4).eval()
    loader = NeighborLoader(data, num_neighbors=[6, 4, 2], batch_size=50, input_nodes=data.train_mask)
    with torch.no_grad():
        for batch in loader:
            full = model(batch.x, batch.edge_index)[: batch.batch_size]
            trimmed = model(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                            num_sampled_edges_per_hop=batch.num_sampled_edges)[: batch.batch_size]
            assert len(batch.num_sampled_nodes) == 4 and len(batch.num_sampled_edges) == 3
            torch.testing.assert_close(trimmed, full, rtol=0, atol=1e-5)


def _ddp_rank(rank: int, world_size: int, init_file: str, out_dir: str) -> None:
    """examples/multi_gpu/papers100m_gcn.py on the CPU: the script splits the train ids itself."""
    from torch.nn.parallel import DistributedDataParallel
    from torch_geometric.nn.models import GCN

    import datetime
    import faulthandler
    import sys

    faulthandler.dump_traceback_later(150, exit=True, file=sys.stderr)  # a hang shows where it hangs
    # imported before the group exists, so its functions' group=WORLD defaults do not keep the group
    # alive past destroy_process_group (gloo threads at exit: ibp_graph.train.loop._import_before_init)
    import torch.distributed.nn  # noqa: F401
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                                         world_size=world_size, timeout=datetime.timedelta(seconds=120))
    data = graphs.homogeneous()
    train_idx = data.train_mask.nonzero().view(-1)
    mine = train_idx.split(train_idx.size(0) // world_size)[rank]
    torch.manual_seed(rank)
    loader = NeighborLoader(data, input_nodes=mine, num_neighbors=[5, 3], batch_size=32, shuffle=True)
    model = DistributedDataParallel(GCN(data.num_features, 32, num_layers=2, out_channels=4))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    seen, batches = [], 0
    for batch in loader:
        opt.zero_grad()
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        F.cross_entropy(out, batch.y[: batch.batch_size]).backward()
        opt.step()
        seen.append(batch.n_id[: batch.batch_size])
        batches += 1
    torch.save({"mine": mine, "seen": torch.cat(seen), "batches": batches}, os.path.join(out_dir, f"{rank}.pt"))
    # DDP's reducer holds the group: freed after destroy_process_group, its destructor waited on gloo's
    # threads for good now and then (a hang as _ddp_rank returned); freed first, it ends with the group
    del model, opt
    torch.distributed.destroy_process_group()  # the watchdog stays armed: ranks.exit_after ends the process


def test_papers100m_gcn_ddp_ranks_train_on_the_seeds_the_script_gave_them(tmp_path):
    """Each rank's loader takes every seed the script handed it (PyG's loader splits nothing; ours
    split them again: half the batches, and the example crashed)."""
    from tests.examples.ranks import run_ranks

    run_ranks("tests.examples.test_pyg_examples", "_ddp_rank", tmp_path)
    results = [torch.load(tmp_path / f"{r}.pt") for r in range(2)]
    for r in results:
        assert torch.equal(r["seen"].sort().values, r["mine"].sort().values)
    assert results[0]["batches"] == results[1]["batches"] == -(-results[0]["mine"].numel() // 32)


def test_reddit_subgraph_loader_honours_attributes_deleted_and_added_after_construction():
    """examples/reddit.py: the layer-wise inference loader over all nodes (num_neighbors=[-1]) has its
    x and y deleted and an n_id attribute added after construction, and reads batch.n_id; PyG reads
    its data at every batch, so the batches carry neither x nor y, and n_id is the user's (they
    still gathered x, and n_id was replaced)."""
    import copy

    from torch_geometric.nn.models import GraphSAGE

    data = graphs.homogeneous()
    torch.manual_seed(0)
    train_loader = NeighborLoader(data, input_nodes=data.train_mask, num_neighbors=[5, 3], shuffle=True,
                                  batch_size=64)
    subgraph_loader = NeighborLoader(copy.copy(data), input_nodes=None, num_neighbors=[-1], shuffle=False,
                                     batch_size=128)
    del subgraph_loader.data.x, subgraph_loader.data.y
    subgraph_loader.data.num_nodes = data.num_nodes
    subgraph_loader.data.n_id = torch.arange(data.num_nodes) * 3  # the user's own values (reddit's: arange)
    model = GraphSAGE(data.num_features, 32, num_layers=2, out_channels=4)
    forward = lambda m, b: m(b.x, b.edge_index)[: b.batch_size]
    target = lambda b: b.y[: b.batch_size]
    losses = _epochs(model, train_loader, int(data.train_mask.sum()), 3, forward, target)
    assert losses[-1] < 0.8 * losses[0]
    model.eval()
    x_all = data.x
    with torch.no_grad():
        for i, conv in enumerate(model.convs):
            xs = []
            for batch in subgraph_loader:
                assert "x" not in batch and "y" not in batch
                assert torch.equal(batch.n_id % 3, torch.zeros_like(batch.n_id))  # the user's n_id, gathered
                x = conv(x_all[batch.n_id // 3], batch.edge_index)
                xs.append((x.relu() if i < len(model.convs) - 1 else x)[: batch.batch_size])
            x_all = torch.cat(xs)
    full = model(data.x, data.edge_index)  # layer-wise over all in-edges == the full-graph forward
    torch.testing.assert_close(x_all, full, rtol=0, atol=1e-4)


def _link_epochs(model, loader, epochs: int, logits_and_labels) -> list[float]:
    """Mean binary cross-entropy per epoch of a link-prediction loop (the examples' `train()`)."""
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(epochs):
        total = count = 0.0
        for batch in loader:
            opt.zero_grad()
            logits, label = logits_and_labels(model, batch)
            loss = F.binary_cross_entropy_with_logits(logits, label)
            loss.backward()
            opt.step()
            total += float(loss) * label.numel()
            count += label.numel()
        losses.append(total / count)
    return losses


def _graph_sage_unsup(codec: str) -> list[float]:
    """examples/graph_sage_unsup.py: LinkNeighborLoader with binary negatives, GraphSAGE, binary cross-entropy
    on the dot products of the endpoints' embeddings."""
    from torch_geometric.nn.models import GraphSAGE

    from ibp_graph.loaders.pyg import CompressedLinkNeighborLoader as LinkNeighborLoader

    data = graphs.homogeneous(num_nodes=400)
    torch.manual_seed(12345)
    loader = LinkNeighborLoader(data, batch_size=128, shuffle=True, neg_sampling_ratio=1.0,
                                num_neighbors=[5, 3], codec=codec)
    model = GraphSAGE(data.num_node_features, hidden_channels=32, num_layers=2)

    def logits_and_labels(model, batch):
        h = model(batch.x, batch.edge_index)
        h_src, h_dst = h[batch.edge_label_index[0]], h[batch.edge_label_index[1]]
        return (h_src * h_dst).sum(dim=-1), batch.edge_label

    return _link_epochs(model, loader, 4, logits_and_labels)


def test_graph_sage_unsup_link_loop_learns_and_compression_changes_no_loss():
    auto, identity = _graph_sage_unsup("auto"), _graph_sage_unsup("identity")
    assert auto == identity
    assert auto[-1] < 0.9 * auto[0], auto


def _to_hetero_link(codec: str) -> list[float]:
    """A to_hetero link-prediction loop (PyG's hetero link examples): LinkNeighborLoader over one edge type
    with binary negatives, a to_hetero GNN, a dot-product decoder on the edge type's endpoints."""
    from torch_geometric.nn import to_hetero

    from ibp_graph.loaders.pyg import CompressedLinkNeighborLoader as LinkNeighborLoader

    data = graphs.mag()
    edge_type = ("author", "writes", "paper")
    torch.manual_seed(0)
    loader = LinkNeighborLoader(data, num_neighbors=[5, 3], batch_size=128, shuffle=True,
                                edge_label_index=(edge_type, data[edge_type].edge_index),
                                neg_sampling="binary", codec=codec)
    model = to_hetero(_HeteroGNN(32, 32), data.metadata(), aggr="sum")
    with torch.no_grad():  # initialise the lazy modules
        batch = next(iter(loader))
        model(batch.x_dict, batch.edge_index_dict)

    def logits_and_labels(model, batch):
        h = model(batch.x_dict, batch.edge_index_dict)
        index = batch[edge_type].edge_label_index
        return (h["author"][index[0]] * h["paper"][index[1]]).sum(dim=-1), batch[edge_type].edge_label

    return _link_epochs(model, loader, 4, logits_and_labels)


def test_to_hetero_link_loop_learns_and_compression_changes_no_loss():
    auto, identity = _to_hetero_link("auto"), _to_hetero_link("identity")
    assert auto == identity
    assert auto[-1] < 0.9 * auto[0], auto
