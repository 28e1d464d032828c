"""A training run's start-up, the same for node classification (train/loop.py) and link prediction
(train/link.py): check the config with the front-end, join the process group, open the data set (and, for
`loader.features: sharded`, this rank's shards), prepare the front-end's graph, list the codecs to run.

The openers are handed in (train/loop.py's ``setup_distributed``, ``open_dataset`` or train/link.py's
``open_link_dataset``, ``open_shards``), so train/link.py still does not import the loop.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from ..files import read_json
from . import sharding
from .config import Config, ConfigError
from .frontends import NATIVE

__all__ = ["Started", "start", "check_prepared_name"]


@dataclass(frozen=True)
class Started:
    """What a run's codecs share: this process's place (`dist`), its `device`, the data set `ds`, the
    front-end's `graph` of it, the `codecs` to run in order, and this rank's `shards` (sharding.RankShards; None
    unless sharded: then `ds` is opened without its feature tables)."""

    dist: Any
    device: torch.device
    ds: Any
    graph: Any
    codecs: list[str]
    shards: Optional[sharding.RankShards]


def start(cfg: Config, front, *, setup: Callable, open_data: Callable, open_shards: Optional[Callable],
          baseline: bool = False) -> Started:
    """Start the (checked) experiment `cfg` with front-end `front`: `setup(device_name)` joins the process
    group and returns (dist, device), `open_data(cfg.data, dist, progress=, features=)` opens the data set (without
    its feature tables for `loader.features: sharded`: a host needs no x.npy), `open_shards(cfg.data, ds, dist,
    progress=)` this rank's shards (sharding.RankShards) for `loader.features: sharded`;
    `baseline` adds the framework's own loader (codec "native") after `cfg.loader.codecs`."""
    front.check(cfg)
    if baseline:
        front.check_baseline()
    dist, device = setup(cfg.loader.device)
    front.check_device(device)
    sharded = cfg.loader.features == "sharded"
    if sharded:
        sharding.check_world(dist.world_size)
        if open_shards is None:
            raise ValueError("loader.features='sharded' needs open_shards (run_link's shards=), the function that "
                             "opens this rank's shards (train/loop.py's open_shards); none was given")
    progress = cfg.output.progress
    ds = open_data(cfg.data, dist, progress=progress, features=not sharded)
    shards = open_shards(cfg.data, ds, dist, progress=progress) if sharded else None
    graph = front.prepare(ds)
    codecs = list(cfg.loader.codecs) + ([NATIVE] if baseline else [])
    if shards is not None:
        sharding.check_codecs(codecs, shards.tables)
    return Started(dist=dist, device=device, ds=ds, graph=graph, codecs=codecs, shards=shards)


def check_prepared_name(cfg, path: Path) -> None:
    """A ConfigError when the prepared folder `path` (data.prepared, or the data set's default folder) holds a
    data set other than DataConfig `cfg`'s data.name: the run would train on it under the asked-for name."""
    try:
        found = read_json(Path(path) / "meta.json").get("name")
    except ValueError:
        return  # no finished preparation there: it is prepared, or refused by load, naming what is wrong
    if isinstance(found, str) and found != cfg.name:
        key = f"data.prepared={str(cfg.prepared)!r}" if cfg.prepared else f"data.root={cfg.root!r}"
        raise ConfigError(f"{key} is not accepted with data.name={cfg.name!r}: {path} holds data set {found!r}; "
                          f"expected a folder prepared from {cfg.name} (`ibp-graph prepare --dataset {cfg.name}`), "
                          f"or data.name={found!r}")
