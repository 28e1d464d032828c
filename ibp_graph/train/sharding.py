"""`loader.features: sharded` in the training loops (node classification, train/loop.py; link prediction,
train/link.py): what both do with the shards loop.open_shards opened.

A rank's shards (`RankShards`) are ``tables``: ``{table: (EncodedTable, ShardLayout)}``, one entry per feature
table of the data set (``x``; or one per featured node type of a heterogeneous one), and ``inputs``: each table's
model input (width and statistics, data/input_stats.FeatureInput) as the shards' manifest records it, so that a
host needs neither the raw tables (x.npy) nor the store. Each run (one codec) serves the shards as one
ShardedSource per table (`sources`), shared by all its loaders (one process group and one remote-row cache
per table; the loaders take turns, an epoch's training then its evaluation, so their exchanges never
interleave), handed to each front-end's loader factory as ``tables=``; the front-ends build the model from
``inputs``. A run makes and closes them with `serving`: however the run ends (its last line, an error on any rank,
KeyboardInterrupt, a worker timeout), their gloo groups go with it.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Optional, Sequence

from ..data.input_stats import FeatureInput
from ..data.shards import SHARDS_MANIFEST, default_shards_dir
from ..pipeline.sharded import ShardedSource
from ..pipeline.stats import SHARD_COUNTS
from .config import ConfigError

__all__ = ["RankShards", "shards_dir", "has_shards", "check_world", "check_codecs", "sources", "close", "serving",
           "epoch_counts", "describe_counts"]


@dataclass(frozen=True)
class RankShards:
    """This rank's shard of every feature table, ``tables``: ``{table: (EncodedTable, ShardLayout)}``, and each
    table's model input, ``inputs``: ``{table: FeatureInput}`` (in the data set's order of its tables)."""

    tables: dict
    inputs: dict[str, FeatureInput]


def shards_dir(data, prepared: Path, world_size: int) -> Path:
    """The shards folder of a run of `world_size` ranks: DataConfig `data`'s shards, or the prepared folder's
    shards-<world size>."""
    return Path(data.shards) if data.shards else default_shards_dir(prepared, world_size)


def has_shards(data, prepared: Path, world_size: int) -> bool:
    """Whether the run's shards folder (`shards_dir`) holds a finished manifest."""
    return (shards_dir(data, prepared, world_size) / SHARDS_MANIFEST).is_file()


def check_world(world_size: int) -> None:
    """A ConfigError in a single process: sharded features split the tables over a distributed run's ranks."""
    if world_size == 1:
        raise ConfigError("loader.features='sharded' is not accepted in a single process (world size 1): it "
                          "splits the feature table over the ranks of a distributed run; launch it with "
                          "`torchrun --nproc-per-node W -m ibp_graph.cli train ...` (README: Sharded features "
                          "across hosts), or use loader.features=local")


def check_codecs(codecs: Sequence[str], shards: Mapping) -> None:
    """A ConfigError for a codec the shards do not serve: they send their rows as encoded, so "auto" (each
    table's own codec) and, where every table has one codec, that codec's name."""
    names = {t: table.codec.name for t, (table, _) in shards.items()}
    served = ["auto"] + sorted(set(names.values()) if len(set(names.values())) == 1 else [])
    encoded = ", ".join(f"{t}: {c}" for t, c in sorted(names.items()))
    for i, codec in enumerate(codecs):
        if codec not in served:
            raise ConfigError(f"loader.codecs[{i}]={codec!r} is not accepted with loader.features='sharded': the "
                              f"shards serve their rows as encoded ({encoded}); use one of {served}")


def sources(shards: Mapping, loader) -> dict[str, ShardedSource]:
    """One ShardedSource per table of `shards`, each with a remote-row cache of `loader` (LoaderConfig)'s
    budgets (``shard_cache_bytes`` in host memory, ``shard_device_cache_bytes`` on the GPU), for one run's
    loaders to share."""
    return {t: ShardedSource(table, layout, cache_bytes=loader.shard_cache_bytes,
                             device_cache_bytes=loader.shard_device_cache_bytes,
                             timeout=loader.shard_exchange_timeout)
            for t, (table, layout) in shards.items()}


def close(sources: Optional[Mapping[str, ShardedSource]], *, failed: bool = False) -> None:
    """Close a run's sources (`sources`' result; None: a run without shards), so that a process running many runs
    keeps none of their gloo groups' threads. At the end of a run that ended well (`failed` false; once its
    loaders' epochs are over on every rank: the epoch's sums), collectively, in one order on every rank
    (ShardedSource.close): a source whose close fails is raised, once every source is closed (those after it
    locally). Of a run that `failed`: each locally (``close(collective=False)``: no rank waited for, nothing
    raised)."""
    first = None
    for name in sorted(sources or {}):
        try:
            sources[name].close(collective=not failed and first is None)
        except Exception as e:  # noqa: BLE001 - the others are closed all the same
            first = first or e
    if first is not None:
        raise first


@contextlib.contextmanager
def serving(shards: Optional[Mapping], loader) -> Iterator[Optional[dict[str, ShardedSource]]]:
    """One run's sources (`sources` of `shards` and LoaderConfig `loader`; None where `shards` is None: a run without
    shards), closed when the block ends: collectively when it ends well (`close`), locally when it raises
    (``close(..., failed=True)``: after a failure on any rank the ranks' collectives need not pair, and a collective
    close could wait for a dead or busy peer until the exchange's timeout). The block's exception is raised as it
    was; a close that fails as well is a note on it."""
    tables = None if shards is None else sources(shards, loader)
    try:
        yield tables
    except BaseException as e:  # KeyboardInterrupt too: the groups' threads must not outlive the run
        try:
            close(tables, failed=True)
        except Exception as also:  # noqa: BLE001 - never in place of the run's own error
            if hasattr(e, "add_note"):  # Python 3.11
                e.add_note(f"closing the run's sharded sources failed as well: {type(also).__name__}: {also}")
        raise
    close(tables)


def epoch_counts(dist, stats) -> dict:
    """The sharded tables' rows and bytes of an epoch (SHARD_COUNTS), summed over the loaders' `stats` and
    over ranks (`dist`: train/loop.py's Dist)."""
    return dict(zip(SHARD_COUNTS, map(int, dist.sum([sum(s.shard[k] for s in stats) for k in SHARD_COUNTS]))))


def describe_counts(sh: dict) -> str:
    """The epoch line's part about the sharded tables: remote rows, cache hits, bytes received for them."""
    rows = sh["local_rows"] + sh["remote_rows"] + sh["remote_hits"]
    remote = sh["remote_rows"] + sh["remote_hits"]
    return (f"; shards: {remote / max(rows, 1):.3f} of rows remote ({sh['remote_hits'] / max(remote, 1):.3f} from "
            f"the cache, {sh['device_hits'] / max(remote, 1):.3f} from its device tier), received {sh['wire_bytes'] / 1e6:,.1f} MB for {sh['remote_raw_bytes'] / 1e6:,.1f} MB raw")
