#!/usr/bin/env python
"""ogbn-papers100M with PyG: GraphSAGE (or GCN, GAT) fed by CompressedNeighborLoader.

    # OGB's files at DATA/ogbn_papers100M (raw/data.npz, raw/node-label.npz, split/time/*.csv.gz)
    python scripts/train_papers100m_pyg.py --root DATA
    # every GPU of a machine, or several machines (same command on each, see torchrun --help)
    torchrun --standalone --nproc_per_node=8 scripts/train_papers100m_pyg.py --root DATA
    # no download: the generated papers100M-like stand-in, at full size or smaller
    python scripts/train_papers100m_pyg.py --synthetic 111059956

The first run converts OGB's files once (`ibp-graph prepare`: CSC graph, features,
labels, splits, and the features pre-encoded with the codec fit_codec picks: IBP, EBP or
identity) into DATA/ogbn_papers100M/ibp_prepared; later runs memory-map it. The training
step is plain PyG::

    loader = CompressedNeighborLoader(({"x": store}, graph), [15, 10, 5], input_nodes=train_idx,
                                      batch_size=1024, shuffle=True, num_workers=8, device="cuda",
                                      edge_ids=False)  # no batch.e_id: the sampler skips edge ids
    for batch in loader:                      # a torch_geometric.data.Data on the GPU
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        loss = F.cross_entropy(out, y[batch.input_id])

Flags map onto the keys of configs/papers100m.yaml (the same run as
`ibp-graph train --config configs/papers100m.yaml --set ...`); results go to
runs/papers100m-*.json, one line per epoch on the way.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ibp_graph.codec.auto import KINDS
from ibp_graph.train.config import ConfigError, load_config
from ibp_graph.train.loop import main_config

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "papers100m.yaml"


def parse(argv=None) -> list[str]:
    """Command-line flags -> config overrides."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", help="the folder holding OGB's ogbn_papers100M folder (with --synthetic: the folder the "
                                  "generated data set is written to, default data_cache)")
    p.add_argument("--prepared", help="the prepared folder (default ROOT/ogbn_papers100M/ibp_prepared)")
    p.add_argument("--dataset", default=None, help="another OGB data set with the same recipe "
                   "(ogbn-products, ogbn-arxiv)")
    p.add_argument("--synthetic", type=int, metavar="NODES",
                   help="train on the generated papers100M-like data set with NODES nodes instead")
    p.add_argument("--arch", choices=["sage", "gcn", "gat"])
    p.add_argument("--hidden", type=int)
    p.add_argument("--num-neighbors", type=int, nargs="+", metavar="K")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--epochs", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--codec", nargs="+", choices=KINDS, help="one run per codec (default auto)")
    p.add_argument("--num-workers", type=int)
    p.add_argument("--device", help="auto (default), cpu, cuda")
    p.add_argument("--no-store", action="store_true", help="encode features per batch instead of the store")
    p.add_argument("--max-batches", type=int, help="training batches per epoch (smoke tests)")
    p.add_argument("--out", help="results folder (default runs)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any other config key")
    a = p.parse_args(argv)
    for flag, value in (("--dataset", a.dataset), ("--prepared", a.prepared)):
        if a.synthetic is not None and value is not None:  # either would be ignored: the generated set wins
            p.error(f"{flag} {value} is not accepted with --synthetic {a.synthetic}: --synthetic trains on the "
                    f"generated data set (written under --root, default data_cache); pass one or the other")
    sets = []
    if a.synthetic is not None:
        spec = {"num_nodes": a.synthetic, "avg_citations": 14.5, "labeled_fraction": 0.0136}
        sets += ["data.name=synthetic", "data.root=data_cache"] + [f"data.synthetic.{k}={v}" for k, v in spec.items()]
    elif a.dataset:
        sets.append(f"data.name={a.dataset}")
    flags = {"data.root": a.root, "data.prepared": a.prepared, "model.arch": a.arch, "model.hidden": a.hidden,
             "loader.num_neighbors": a.num_neighbors, "loader.batch_size": a.batch_size,
             "train.epochs": a.epochs, "train.lr": a.lr, "loader.codecs": a.codec,
             "loader.num_workers": a.num_workers, "loader.device": a.device,
             "train.max_batches": a.max_batches, "output.dir": a.out}
    sets += [f"{k}={v}" for k, v in flags.items() if v is not None]
    if a.no_store:
        sets.append("data.store=false")
    if a.no_progress:
        sets.append("output.progress=false")
    return sets + a.set


def main(argv=None) -> int:
    sets = parse(argv)
    try:
        cfg = load_config(CONFIG, sets)
    except ConfigError as e:
        print(f"{Path(__file__).name}: {e}", file=sys.stderr)
        return 2
    return main_config(cfg)


if __name__ == "__main__":
    sys.exit(main())
