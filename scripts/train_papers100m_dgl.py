#!/usr/bin/env python
"""GraphSAGE on ogbn-papers100M with DGL: DGL's NeighborSampler and SAGEConv, features loaded compressed.

The DGL counterpart of `ibp-graph train` (PyG): the same prepared folder (`ibp-graph prepare
--dataset ogbn-papers100M --root DIR`: memory-mapped .npy arrays) and the same YAML schema
(ibp_graph/train/config.py). Next to DGL's own GraphSAGE example only the loader differs:
CompressedDGLDataLoader in place of dgl.dataloading.DataLoader. Runs in the DGL environment
(`make venv-dgl`; dgl 2.1 needs torch 2.2.1):

    .venv-dgl/bin/python scripts/train_papers100m_dgl.py --config configs/papers100m_dgl.yaml
    ... --set data.name=synthetic --set data.synthetic.num_nodes=20000   # generated stand-in
    ... --baseline          # also train with DGL's own (uncompressed) DataLoader

One run per codec in loader.codecs (and one for the baseline): a line per epoch, and a JSON
per run in OUTPUT.DIR/NAME/<time>-dgl-<loader>.json. The DGL wheels in the package index are
CPU builds, whose graphs cannot move to a GPU: there, use loader.device=cpu.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("DGLBACKEND", "pytorch")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dgl  # noqa: E402
from ibp_graph.loaders.dgl import CompressedDGLDataLoader  # noqa: E402
from ibp_graph.train.config import ConfigError, load_config, to_dict  # noqa: E402

RUN_FORMAT = "ibp_graph.run_dgl"
BASELINE = "dgl"  # the run with DGL's own DataLoader


def load_prepared(data_cfg, *, progress: bool) -> tuple["dgl.DGLGraph", dict, int, str]:
    """The prepared data set as a DGL graph with ndata feat and label; its splits, classes and name.

    The one place this script depends on the data preparation (ibp_graph.data.prepared):
    the folder is opened memory-mapped and the feature table is not copied.
    """
    from ibp_graph.data.prepared import as_tensor
    from ibp_graph.train.loop import open_dataset

    ds = open_dataset(data_cfg, progress=progress)
    csc = ds.graph  # in-edges by destination; edge ids in CSC order (no edge features here)
    # DGL wants one id type for the whole graph: the prepared indices are int32 where node ids
    # fit (half the memory), so they are widened to int64 here (a copy; int64 ones are mapped)
    indices = np.asarray(csc.indices, dtype=np.int64)
    g = dgl.graph(("csc", (as_tensor(csc.indptr), as_tensor(indices), torch.tensor([], dtype=torch.int64))),
                  num_nodes=ds.num_nodes).formats("csc")  # only CSC: workers would build COO and CSR too
    g.ndata["feat"] = ds.x
    g.ndata["label"] = ds.y  # int64, -1 for unlabeled nodes (the splits hold labeled nodes only)
    return g, dict(ds.split), ds.num_classes, ds.name


class SAGE(torch.nn.Module):
    """DGL's GraphSAGE for mini-batches of blocks: mean aggregation, ReLU and dropout between layers."""

    def __init__(self, in_feats: int, hidden: int, num_classes: int, num_layers: int, dropout: float):
        super().__init__()
        sizes = [in_feats] + [hidden] * (num_layers - 1) + [num_classes]
        self.layers = torch.nn.ModuleList(dgl.nn.SAGEConv(a, b, "mean") for a, b in zip(sizes[:-1], sizes[1:]))
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, blocks, x):
        h = x.float()
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i < len(self.layers) - 1:
                h = self.dropout(h.relu())
        return h


def make_loader(kind: str, g, ids, cfg, *, batch_size: int, shuffle: bool, device: torch.device):
    """DGL's own DataLoader (kind "dgl") or CompressedDGLDataLoader with codec `kind`."""
    lc = cfg.loader
    sampler = dgl.dataloading.NeighborSampler(list(lc.num_neighbors), prefetch_node_feats=["feat"],
                                              prefetch_labels=["label"])
    kw = dict(device=device, batch_size=batch_size, shuffle=shuffle, num_workers=lc.num_workers,
              persistent_workers=lc.num_workers > 0)
    if kind == BASELINE:
        return dgl.dataloading.DataLoader(g, ids, sampler, **kw)
    return CompressedDGLDataLoader(g, ids, sampler, codec=kind, prefetch=lc.prefetch, **kw)


def train_epoch(model, loader, optimizer, max_batches) -> dict:
    model.train()
    loss_sum = correct = count = 0.0
    t = time.perf_counter()
    for i, (_, _, blocks) in enumerate(loader):
        if max_batches is not None and i >= max_batches:
            break
        y = blocks[-1].dstdata["label"]
        out = model(blocks, blocks[0].srcdata["feat"])
        loss = F.cross_entropy(out, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_sum += float(loss.detach()) * y.numel()
        correct += float((out.detach().argmax(1) == y).sum())
        count += y.numel()
    return {"loss": loss_sum / max(count, 1), "acc": correct / max(count, 1), "seconds": time.perf_counter() - t}


@torch.no_grad()
def evaluate(model, loader) -> float:
    model.eval()
    correct = count = 0
    for _, _, blocks in loader:
        y = blocks[-1].dstdata["label"]
        correct += int((model(blocks, blocks[0].srcdata["feat"]).argmax(1) == y).sum())
        count += y.numel()
    return correct / max(count, 1)


def run_one(cfg, kind: str, g, splits: dict, num_classes: int, name: str, device: torch.device) -> dict:
    """Train and evaluate with one loader; one line per epoch; the result as a dict."""
    seed = cfg.train.seed
    dgl.utils.set_num_threads(1)  # DGL's CPU sampling repeats under dgl.seed only with one thread
    np.random.seed(seed)
    torch.manual_seed(seed)
    dgl.seed(seed)
    lc = cfg.loader
    loaders = {part: make_loader(kind, g, ids, cfg, batch_size=lc.batch_size if part == "train" else lc.eval_batch_size,
                                 shuffle=part == "train", device=device)
               for part, ids in splits.items()}
    model = SAGE(g.ndata["feat"].shape[1], cfg.model.hidden, num_classes, len(lc.num_neighbors),
                 cfg.model.dropout).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
    print(f"[{cfg.name}] {name} with DGL {dgl.__version__}: {g.num_nodes():,} nodes, {g.num_edges():,} edges; "
          f"sage x{len(lc.num_neighbors)}, fan-out {list(lc.num_neighbors)}, batch {lc.batch_size}, "
          f"loader {'DGL DataLoader' if kind == BASELINE else f'CompressedDGLDataLoader codec {kind}'}, "
          f"device {device}", flush=True)
    epochs = []
    for epoch in range(1, cfg.train.epochs + 1):
        if kind != BASELINE:
            for ld in loaders.values():
                ld.stats.reset()
        tr = train_epoch(model, loaders["train"], optimizer, cfg.train.max_batches)
        rec = {"epoch": epoch, "loss": tr["loss"], "train_acc": tr["acc"], "train_seconds": tr["seconds"]}
        if epoch % cfg.train.eval_every == 0 or epoch == cfg.train.epochs:
            t = time.perf_counter()
            rec.update(valid_acc=evaluate(model, loaders["valid"]), test_acc=evaluate(model, loaders["test"]),
                       eval_seconds=time.perf_counter() - t)
        stats = loaders["train"].stats if kind != BASELINE else None
        if stats is not None:
            rec.update(sent_bytes=stats.total_sent_bytes, raw_bytes=stats.total_raw_bytes,
                       fraction=stats.fraction, stage_seconds=dict(stats.seconds))
        epochs.append(rec)
        acc = f"  valid {rec['valid_acc']:.4f}  test {rec['test_acc']:.4f}" if "valid_acc" in rec else ""
        moved = (f"  moved {stats.total_sent_bytes / 1e6:,.1f} MB of {stats.total_raw_bytes / 1e6:,.1f} MB raw "
                 f"({stats.fraction:.3f})" if stats is not None else "")
        print(f"epoch {epoch:>2}/{cfg.train.epochs}  loss {rec['loss']:.4f}  train {rec['train_acc']:.4f}{acc}  "
              f"train {tr['seconds']:.1f} s{moved}", flush=True)
    if kind != BASELINE:
        print(loaders["train"].stats, flush=True)
    return {"format": RUN_FORMAT, "version": 1, "name": cfg.name, "dataset": name, "frontend": "dgl",
            "loader": kind, "dgl_version": dgl.__version__, "torch_version": torch.__version__,
            "device": str(device), "config": to_dict(cfg), "epochs": epochs}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/papers100m_dgl.yaml", help="the experiment (YAML)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key, e.g. --set loader.batch_size=2048 (VALUE is YAML)")
    p.add_argument("--baseline", action="store_true", help="also run DGL's own DataLoader (uncompressed)")
    a = p.parse_args(argv)
    try:
        cfg = load_config(a.config, a.set)
    except ConfigError as e:
        print(f"train_papers100m_dgl: {e}", file=sys.stderr)
        return 2
    if cfg.model.arch != "sage":
        print(f"train_papers100m_dgl: model.arch={cfg.model.arch!r} is not accepted; this script trains 'sage'",
              file=sys.stderr)
        return 2
    from ibp_graph.train.loop import resolve_device

    device = resolve_device(cfg.loader.device)
    if device.type == "cuda":
        try:
            dgl.graph(([0], [0])).to(device)
        except Exception as e:  # the index's dgl wheels are CPU builds
            print(f"train_papers100m_dgl: loader.device={cfg.loader.device!r} ({device}), but this dgl cannot "
                  f"place graphs there ({type(e).__name__}: {e}); use --set loader.device=cpu or a CUDA "
                  "build of dgl", file=sys.stderr)
            return 2
    g, splits, num_classes, name = load_prepared(cfg.data, progress=cfg.output.progress)
    kinds = list(cfg.loader.codecs) + ([BASELINE] if a.baseline else [])
    out_dir = Path(cfg.output.dir) / cfg.name
    out_dir.mkdir(parents=True, exist_ok=True)
    for kind in kinds:
        result = run_one(cfg, kind, g, splits, num_classes, name, device)
        path = out_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-dgl-{kind}.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
