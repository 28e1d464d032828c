"""DGL's example scripts as a user runs them, shortened: only the DataLoader class is swapped.

Our own short, deterministic versions of DGL's example loops (written from their documented
behaviour) on the generated stand-ins of tests/examples/graphs.py, run with DGL's own
DataLoader and with CompressedDGLDataLoader: same seeds, the same losses bit for bit (codec
auto and identity alike), and the model learns. They run in .venv-dgl (`make test-dgl`).
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("DGLBACKEND", "pytorch")
try:
    import dgl
except Exception:  # not installed, or installed for another torch
    dgl = None

from tests.examples import graphs

pytestmark = [pytest.mark.dgl, pytest.mark.filterwarnings("ignore:Dataloader CPU affinity")]


def _seed(seed: int) -> None:
    """numpy (DGL's shuffle), torch (model, worker seeds) and dgl (sampling, repeatable with one thread)."""
    dgl.utils.set_num_threads(1)
    np.random.seed(seed)
    torch.manual_seed(seed)
    dgl.seed(seed)


def _graph():
    data = graphs.homogeneous_tensors()
    g = dgl.graph((data["edge_index"][0], data["edge_index"][1]), num_nodes=data["x"].shape[0])
    g.ndata["feat"], g.ndata["label"] = data["x"], data["y"]
    return g, data["train_mask"].nonzero().view(-1), data["val_mask"].nonzero().view(-1)


class _SAGE(torch.nn.Module):
    """graphsage/node_classification.py's model: SAGEConv-mean per layer, layer-wise inference."""

    def __init__(self, in_size: int, hidden: int, out: int, layers: int = 2):
        import dgl.nn as dglnn

        super().__init__()
        sizes = [in_size] + [hidden] * (layers - 1) + [out]
        self.layers = torch.nn.ModuleList(dglnn.SAGEConv(a, b, "mean") for a, b in zip(sizes, sizes[1:]))

    def forward(self, blocks, x):
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            x = layer(block, x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x

    @torch.no_grad()
    def inference(self, g, loader_cls, **kw):
        """Layer by layer over all nodes with a one-hop full-neighbour sampler, as the example does."""
        feat = g.ndata["feat"]
        sampler = dgl.dataloading.MultiLayerFullNeighborSampler(1, prefetch_node_feats=["feat"])
        loader = loader_cls(g, torch.arange(g.num_nodes()), sampler, batch_size=128, shuffle=False, **kw)
        for i, layer in enumerate(self.layers):
            y = torch.empty(g.num_nodes(), layer._out_feats)
            for input_nodes, output_nodes, blocks in loader:
                h = layer(blocks[0], feat[input_nodes])
                y[output_nodes] = F.relu(h) if i < len(self.layers) - 1 else h
            feat = y
        return feat


def _node_classification(loader_cls, **kw):
    g, train_idx, val_idx = _graph()
    _seed(0)
    model = _SAGE(g.ndata["feat"].shape[1], 32, 4)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sampler = dgl.dataloading.NeighborSampler([5, 3], prefetch_node_feats=["feat"], prefetch_labels=["label"])
    loader = loader_cls(g, train_idx, sampler, batch_size=64, shuffle=True, drop_last=False, **kw)
    losses = []
    for _ in range(4):
        model.train()
        total = 0.0
        for _, _, blocks in loader:
            y = blocks[-1].dstdata["label"]
            loss = F.cross_entropy(model(blocks, blocks[0].srcdata["feat"]), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss) * y.numel()
        losses.append(total / train_idx.numel())
    model.eval()
    pred = model.inference(g, loader_cls, **kw).argmax(1)
    return losses, float((pred[val_idx] == g.ndata["label"][val_idx]).float().mean())


@pytest.mark.parametrize("num_workers", [0, 2])
def test_graphsage_node_classification_gives_dgls_losses(num_workers):
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    kw = dict(num_workers=num_workers, persistent_workers=num_workers > 0)
    theirs, their_acc = _node_classification(dgl.dataloading.DataLoader, **kw)
    for codec in ("auto", "identity"):
        ours, acc = _node_classification(CompressedDGLDataLoader, codec=codec, **kw)
        assert ours == theirs and acc == their_acc, (codec, ours, theirs)
    assert theirs[-1] < 0.8 * theirs[0] and their_acc > 0.5, (theirs, their_acc)


def _mag_graph():
    """An ogbn-mag-like DGL heterograph: featured, labelled papers; featureless authors (learned
    embeddings, as hetero_rgcn.py gives them); writes, written-by and cites edges."""
    g_ = torch.Generator().manual_seed(4)
    papers, authors, dim = 400, 300, 16
    x = torch.randn(papers, dim, generator=g_)
    writes = (torch.randint(0, authors, (1200,), generator=g_), torch.randint(0, papers, (1200,), generator=g_))
    cites = (torch.randint(0, papers, (1600,), generator=g_), torch.randint(0, papers, (1600,), generator=g_))
    g = dgl.heterograph({("author", "writes", "paper"): writes, ("paper", "written_by", "author"): writes[::-1],
                         ("paper", "cites", "paper"): cites},
                        num_nodes_dict={"paper": papers, "author": authors})
    g.nodes["paper"].data["feat"] = x
    g.nodes["paper"].data["label"] = x[:, :4].argmax(1)
    return g, torch.arange(0, papers, 2)


class _RGCN(torch.nn.Module):
    """hetero_rgcn.py's shape: a HeteroGraphConv per layer, one conv per relation, learned author embeddings."""

    def __init__(self, g, dim: int, hidden: int, out: int):
        import dgl.nn as dglnn

        super().__init__()
        self.embed = torch.nn.Embedding(g.num_nodes("author"), dim)
        rel = lambda a, b: dglnn.HeteroGraphConv({e: dglnn.SAGEConv(a, b, "mean") for e in g.etypes}, aggregate="sum")
        self.layers = torch.nn.ModuleList([rel(dim, hidden), rel(hidden, out)])

    def forward(self, blocks, h):
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i < len(self.layers) - 1:
                h = {k: F.relu(v) for k, v in h.items()}
        return h["paper"]


def _entity_sample(loader_cls, **kw):
    """entity_sample.py / hetero_rgcn.py: the sampler prefetches nothing; the loop reads the paper
    features from g.ndata by input_nodes and embeds the authors itself."""
    g, train_idx = _mag_graph()
    _seed(0)
    model = _RGCN(g, 16, 32, 4)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sampler = dgl.dataloading.MultiLayerNeighborSampler([4, 3])
    loader = loader_cls(g, {"paper": train_idx}, sampler, batch_size=50, shuffle=True, **kw)
    losses = []
    for _ in range(4):
        total = 0.0
        for input_nodes, seeds, blocks in loader:
            h = {"paper": g.nodes["paper"].data["feat"][input_nodes["paper"]],
                 "author": model.embed(input_nodes["author"])}
            y = g.nodes["paper"].data["label"][seeds["paper"]]
            loss = F.cross_entropy(model(blocks, h), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss) * y.numel()
        losses.append(total / train_idx.numel())
    return losses


def test_entity_sample_without_prefetched_features_gives_dgls_losses():
    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    theirs = _entity_sample(dgl.dataloading.DataLoader)
    assert _entity_sample(CompressedDGLDataLoader) == theirs  # it refused samplers that prefetch nothing
    assert theirs[-1] < 0.8 * theirs[0], theirs


def _ddp_rank(rank: int, world_size: int, init_file: str, out_dir: str) -> None:
    """multigpu/node_classification.py on the CPU: use_ddp splits the seeds; ours must split them as DGL's."""
    import datetime
    import faulthandler
    import sys

    from ibp_graph.loaders.dgl import CompressedDGLDataLoader

    faulthandler.dump_traceback_later(150, exit=True, file=sys.stderr)  # a hang shows where it hangs
    # imported before the group exists, so its functions' group=WORLD defaults do not keep the group
    # alive past destroy_process_group (gloo threads at exit: ibp_graph.train.loop._import_before_init)
    import torch.distributed.nn  # noqa: F401
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                                         world_size=world_size, timeout=datetime.timedelta(seconds=120))
    g, train_idx, _ = _graph()
    out = {}
    for name, cls in (("dgl", dgl.dataloading.DataLoader), ("ours", CompressedDGLDataLoader)):
        _seed(0)
        sampler = dgl.dataloading.NeighborSampler([4, 3], prefetch_node_feats=["feat"], prefetch_labels=["label"])
        loader = cls(g, train_idx, sampler, batch_size=32, shuffle=True, use_ddp=True)
        epochs = []
        for epoch in range(2):  # DGL 2.1's use_ddp reshuffles each rank's share itself (no set_epoch)
            epochs.append([(i.clone(), o.clone(), b[0].srcdata["feat"].clone()) for i, o, b in loader])
        out[name] = epochs
    torch.save(out, os.path.join(out_dir, f"{rank}.pt"))
    torch.distributed.destroy_process_group()  # the watchdog stays armed: ranks.exit_after ends the process


def test_multigpu_use_ddp_ranks_get_dgls_batches(tmp_path):
    """Each rank's CompressedDGLDataLoader(use_ddp=True) gives DGL's own DistributedSampler share,
    batch for batch, every epoch; the ranks' seeds are disjoint."""
    from tests.examples.ranks import run_ranks

    run_ranks("tests.examples.test_dgl_examples", "_ddp_rank", tmp_path)
    seeds = []
    for r in range(2):
        got = torch.load(tmp_path / f"{r}.pt")
        for ours, theirs in zip(got["ours"], got["dgl"]):
            assert len(ours) == len(theirs) > 0
            for (i_a, o_a, x_a), (i_b, o_b, x_b) in zip(ours, theirs):
                assert torch.equal(i_a, i_b) and torch.equal(o_a, o_b) and torch.equal(x_a, x_b)
        seeds.append(torch.cat([o for _, o, _ in got["ours"][0]]))
    assert not set(seeds[0].tolist()) & set(seeds[1].tolist())
