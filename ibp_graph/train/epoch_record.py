"""What an epoch's record says about time and bytes moved, the same for node classification (train/loop.py)
and link prediction (train/link.py): each loop adds its task's loss and metrics.
"""
from __future__ import annotations

from typing import Optional, Sequence

from . import sharding

__all__ = ["transfer", "describe", "fraction", "moved", "NOT_COUNTED"]


def fraction(sent: float, raw: float) -> Optional[float]:
    """`sent` / `raw`, or None when no raw bytes were counted (a framework's own loader, the `--baseline` run,
    counts none: 1.0 would claim it was measured)."""
    return sent / raw if raw else None


#: what a run or epoch line says where no bytes were counted (`fraction` None).
NOT_COUNTED = "bytes moved not counted"


def moved(final: dict) -> str:
    """A run's closing words on bytes: the fraction of the raw bytes it moved, or that none were counted."""
    f = final["fraction"]
    return NOT_COUNTED if f is None else f"moved {f:.3f} of the raw bytes"


def transfer(dist, stats: Sequence, train_stats, *, train_s: float, eval_s: float, sharded: bool) -> dict:
    """An epoch's seconds (`train_s` + `eval_s`, each already the maximum over ranks), the bytes the loaders
    sent and their raw size (all loaders' `stats`; the training loader's `train_stats`), summed over ranks
    (`dist`: train/loop.py's Dist), the training loader's batches (None where its loader counts none) and stage
    seconds, and, when `sharded`, the sharded tables' counts (``shard``: sharding.epoch_counts)."""
    sent, raw, train_sent, train_raw = dist.sum([sum(s.total_sent_bytes for s in stats),
                                                 sum(s.total_raw_bytes for s in stats),
                                                 train_stats.total_sent_bytes, train_stats.total_raw_bytes])
    rec = {"seconds": train_s + eval_s, "train_seconds": train_s, "eval_seconds": eval_s, "sent_bytes": int(sent),
           "raw_bytes": int(raw), "fraction": fraction(sent, raw), "train_sent_bytes": int(train_sent),
           "train_raw_bytes": int(train_raw),
           "train_batches": int(train_stats.batches) if train_stats.counted else None,  # None: not counted
           "stage_seconds": dict(train_stats.seconds)}
    if sharded:  # rows of the sharded tables: this rank's own, fetched, cache hits; bytes received
        rec["shard"] = sharding.epoch_counts(dist, stats)
    return rec


def describe(rec: dict) -> str:
    """The epoch line's part about a `transfer` record: time (train, eval), MB moved of MB raw, the shards'."""
    bytes_ = NOT_COUNTED if rec["fraction"] is None else \
        f"moved {rec['sent_bytes'] / 1e6:,.1f} MB of {rec['raw_bytes'] / 1e6:,.1f} MB raw ({rec['fraction']:.3f})"
    return (f"time {rec['seconds']:.1f} s (train {rec['train_seconds']:.1f}, eval {rec['eval_seconds']:.1f})  "
            + bytes_ + (sharding.describe_counts(rec["shard"]) if "shard" in rec else ""))
