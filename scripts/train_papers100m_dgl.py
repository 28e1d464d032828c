#!/usr/bin/env python
"""ogbn-papers100M with DGL: GraphSAGE (DGL's SAGEConv on blocks) fed by CompressedDGLDataLoader.

The same run as ``ibp-graph train --config configs/papers100m_dgl.yaml`` (``loader.framework:
dgl``): the training loop is ibp_graph/train/loop.py, shared with PyG. Next to DGL's own
GraphSAGE example only the loader differs: CompressedDGLDataLoader in place of
dgl.dataloading.DataLoader. Runs in the DGL environment (`make venv-dgl`; dgl 2.1 needs
torch 2.2.1)::

    .venv-dgl/bin/python scripts/train_papers100m_dgl.py --root DATA
    ... --set data.name=synthetic --set data.synthetic.num_nodes=20000   # generated stand-in
    ... --baseline               # also train with DGL's own (uncompressed) DataLoader

One run per codec in loader.codecs (and one, codec "native", for the baseline): a line per
epoch, and a JSON per run in OUTPUT.DIR/<name>-<time>-<codec>.json. The DGL wheels in the
package index are CPU builds, whose graphs cannot move to a GPU: there, use --device cpu.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ibp_graph.train.config import ConfigError, load_config
from ibp_graph.train.loop import main_config

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "papers100m_dgl.yaml"


def parse(argv=None) -> tuple[argparse.Namespace, list[str]]:
    """Command-line flags -> (the arguments, config overrides)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(CONFIG), help="the experiment (default configs/papers100m_dgl.yaml)")
    p.add_argument("--root", help="the folder holding OGB's ogbn_papers100M folder")
    p.add_argument("--epochs", type=int)
    p.add_argument("--num-workers", type=int)
    p.add_argument("--device", help="cpu (default: the index's dgl is a CPU build), auto, cuda")
    p.add_argument("--baseline", action="store_true", help="also run DGL's own DataLoader (uncompressed)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any other config key")
    a = p.parse_args(argv)
    flags = {"data.root": a.root, "train.epochs": a.epochs, "loader.num_workers": a.num_workers,
             "loader.device": a.device}
    return a, [f"{k}={v}" for k, v in flags.items() if v is not None] + a.set


def main(argv=None) -> int:
    a, sets = parse(argv)
    try:
        cfg = load_config(a.config, sets + ["loader.framework=dgl"])
    except ConfigError as e:
        print(f"{Path(__file__).name}: {e}", file=sys.stderr)
        return 2
    return main_config(cfg, baseline=a.baseline)


if __name__ == "__main__":
    sys.exit(main())
