"""Bytes and stage times of a loader: per group raw vs sent bytes, seconds per stage, served rows per tier."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..tables import format_table

#: pipeline stages in data-flow order; worker stages first.
STAGES = ("sample", "gather", "encode", "copy", "decode")
#: where feature rows served by the main process came from (pipeline.sources): compressed bytes per tier.
TIERS = ("device_cache", "zero_copy", "worker")
#: what a sharded table's rows cost per batch (Tally; LoaderStats.shard).
SHARD_COUNTS = ("local_rows", "remote_rows", "remote_hits", "remote_hit_bytes", "device_hits", "device_hit_bytes",
                "wire_bytes", "request_bytes", "remote_raw_bytes")


@dataclass
class Tally:
    """One batch's served rows (LoaderStats.add_tiers' keywords), 0-d tensors on the serving device
    until `counts()` (no wait); `worker_bytes`: compressed bytes the workers sent for the caches' misses."""

    hits: Any = 0
    misses: Any = 0
    cache_bytes: Any = 0
    zero_copy_bytes: Any = 0
    worker_bytes: int = 0
    # rows of sharded tables (pipeline.sharded): of this rank's shard, fetched from other ranks, found in
    # the remote-row cache (both tiers; of them in its device tier); bytes received (rows and their
    # lengths), ids sent, raw bytes of the fetched rows
    local_rows: int = 0
    remote_rows: int = 0
    remote_hits: int = 0
    remote_hit_bytes: int = 0  # compressed bytes the remote-row cache served (both tiers)
    device_hits: int = 0
    device_hit_bytes: int = 0  # of them, from its device tier
    wire_bytes: int = 0
    request_bytes: int = 0
    remote_raw_bytes: int = 0

    def counts(self) -> dict[str, int]:
        """The tallies as ints, keyed as add_tiers takes them."""
        return {"worker" if k == "worker_bytes" else k: int(v) for k, v in vars(self).items()}


def _dd(kind):
    return field(default_factory=lambda: defaultdict(kind))


@dataclass
class LoaderStats:
    """Running totals over the batches a loader has produced (reset with reset())."""

    batches: int = 0
    raw_bytes: dict = _dd(int)
    sent_bytes: dict = _dd(int)
    seconds: dict = _dd(float)
    #: host bytes the workers wrote into new buffers (gathers, group concatenation, encode output).
    copied_bytes: int = 0
    #: the codec of each group, by the group's printed name ("ibp", "identity (fallback: ...)").
    codecs: dict = field(default_factory=dict)
    #: rows of cached feature tables found in / missing from the device cache (pipeline.cache).
    cache_hits: int = 0
    cache_misses: int = 0
    #: compressed bytes of the main-process-served feature rows, per tier (TIERS).
    tier_bytes: dict = field(default_factory=lambda: dict.fromkeys(TIERS, 0))
    #: set by the loader, not reset: the device caches' capacity (Capacity.as_dict() per attribute),
    #: and what it says about its batches as a whole (e.g. that nothing is compressed).
    cache: dict = field(default_factory=dict)
    note: str = ""
    #: False for a loader of another library that counts nothing (a training run's --baseline: DGL's own).
    counted: bool = True
    #: rows and bytes of sharded tables (SHARD_COUNTS), summed over batches.
    shard: dict = field(default_factory=lambda: dict.fromkeys(SHARD_COUNTS, 0))

    def add_tiers(self, hits: int, misses: int, cache_bytes: int, zero_copy_bytes: int, *,
                  worker: int = 0, **shard: int) -> None:
        """Count one batch's served feature rows (Tally.counts())."""
        self.cache_hits += int(hits)
        self.cache_misses += int(misses)
        for tier, n in zip(TIERS, (cache_bytes, zero_copy_bytes, worker)):
            self.tier_bytes[tier] += int(n)
        for k, n in shard.items():
            if k not in self.shard:
                raise ValueError(f"add_tiers got {k}={n!r}; accepted counts: {SHARD_COUNTS}")
            self.shard[k] += int(n)

    @property
    def shards_rows(self) -> bool:
        """Whether rows of a sharded table were served."""
        return any(self.shard.values())

    @property
    def local_fraction(self) -> float:
        """Rows of sharded tables read from this rank's shard / all their rows (0.0 before any)."""
        n = self.shard["local_rows"] + self.shard["remote_rows"] + self.shard["remote_hits"]
        return self.shard["local_rows"] / n if n else 0.0

    def _remote_share(self, key: str) -> float:
        n = self.shard["remote_rows"] + self.shard["remote_hits"]
        return self.shard[key] / n if n else 0.0

    @property
    def remote_hit_rate(self) -> float:
        """Remote rows found in the remote-row cache (either tier) / remote rows needed (0.0 before any)."""
        return self._remote_share("remote_hits")

    @property
    def device_hit_rate(self) -> float:
        """Remote rows found in the cache's device tier / remote rows needed (0.0 before any)."""
        return self._remote_share("device_hits")

    @property
    def host_hit_rate(self) -> float:
        """Remote rows found in the cache's host tier / remote rows needed (0.0 before any)."""
        return self.remote_hit_rate - self.device_hit_rate

    @property
    def serves_features(self) -> bool:
        """Whether feature rows were served by the main process or a cache is set."""
        return bool(self.cache or self.cache_hits or self.cache_misses or any(self.tier_bytes.values()))

    @property
    def hit_rate(self) -> float:
        """Cache hits / rows looked up in the device cache (0.0 before any)."""
        n = self.cache_hits + self.cache_misses
        return self.cache_hits / n if n else 0.0

    def add_group(self, key: str, raw: int, sent: int) -> None:
        """Count one group of one batch under its printed name (str of its GroupKey)."""
        self.raw_bytes[key] += raw
        self.sent_bytes[key] += sent

    def add_time(self, stage: str, seconds: float) -> None:
        """Add time spent in a stage (worker stages are summed over workers)."""
        if stage not in STAGES:
            raise ValueError(f"stage={stage!r} is unknown; stages: {STAGES}")
        self.seconds[stage] += seconds

    def add_copied(self, nbytes: int) -> None:
        """Count host bytes one batch's worker copied (EncodedBatch.copied_bytes)."""
        if nbytes < 0:
            raise ValueError(f"nbytes={nbytes} is negative; accepted: a byte count >= 0")
        self.copied_bytes += int(nbytes)

    @property
    def copied_bytes_per_batch(self) -> float:
        """Host bytes copied in the workers per batch (0.0 before the first batch)."""
        return self.copied_bytes / self.batches if self.batches else 0.0

    def reset(self) -> None:
        """Forget everything counted so far."""
        keep = {"codecs": self.codecs, "cache": self.cache, "note": self.note, "counted": self.counted}
        self.__init__(**keep)

    @property
    def total_raw_bytes(self) -> int:
        """Bytes the batches would have moved uncompressed."""
        return sum(self.raw_bytes.values())

    @property
    def total_sent_bytes(self) -> int:
        """Bytes the batches moved (payload plus per-row metadata)."""
        return sum(self.sent_bytes.values())

    @property
    def fraction(self) -> float:
        """Sent / raw over all groups (1.0 before the first batch)."""
        raw = self.total_raw_bytes
        return self.total_sent_bytes / raw if raw else 1.0

    def as_dict(self) -> dict:
        """Plain values for JSON."""
        out = {"batches": self.batches, "raw_bytes": dict(self.raw_bytes),
               "sent_bytes": dict(self.sent_bytes), "seconds": dict(self.seconds),
               "fraction": self.fraction, "copied_bytes": self.copied_bytes,
               "copied_bytes_per_batch": self.copied_bytes_per_batch, "codecs": dict(self.codecs)}
        if self.note:
            out["note"] = self.note
        if self.serves_features:
            out["features"] = {"cache_hits": self.cache_hits, "cache_misses": self.cache_misses,
                               "hit_rate": self.hit_rate, "tier_bytes": dict(self.tier_bytes),
                               "cache": dict(self.cache)}
        if self.shards_rows:
            out["shard"] = {**self.shard, "local_fraction": self.local_fraction,
                            "remote_hit_rate": self.remote_hit_rate, "device_hit_rate": self.device_hit_rate,
                            "host_hit_rate": self.host_hit_rate,
                            "wire_bytes_per_batch": self.shard["wire_bytes"] / max(self.batches, 1)}
        return out

    def table(self) -> str:
        """Two tables: bytes per group, and seconds per stage."""
        rows = [(k, self.raw_bytes[k], self.sent_bytes[k], self.codecs.get(k, "")) for k in sorted(self.raw_bytes)]
        rows = [{"group": k, "raw": raw / 1e6, "sent": sent / 1e6, "fraction": sent / raw if raw else 1.0, "codec": c}
                for k, raw, sent, c in rows + [("total", self.total_raw_bytes, self.total_sent_bytes, "")]]
        columns = [("group", "group", "s"), ("raw", "raw MB", ".2f"), ("sent", "sent MB", ".2f"),
                   ("fraction", "fraction", ".4f")] + ([("codec", "codec", "s")] if self.codecs else [])
        times = [{"stage": s, "total": self.seconds.get(s, 0.0), "ms": self.seconds.get(s, 0.0) / max(self.batches, 1) * 1e3}
                 for s in STAGES]
        lines = [self.note] if self.note else []
        lines += [f"{self.batches} batches", format_table(rows, columns),
                  f"host bytes copied in workers: {self.copied_bytes_per_batch / 1e6:.2f} MB/batch"]
        if self.serves_features:
            lines.append("feature rows served by the main process, MB: " + ", ".join(
                f"{t} {self.tier_bytes[t] / 1e6:.2f}" for t in TIERS) + f"; device cache hit rate {self.hit_rate:.4f}")
            lines += [f"device cache {k}: {c['rows']:,} rows compressed ({c['raw_rows']:,} raw) in "
                      f"{c['budget_bytes'] / 1e6:.1f} MB" for k, c in self.cache.items()]
        if self.shards_rows:
            sh = self.shard
            host_mb = (sh["remote_hit_bytes"] - sh["device_hit_bytes"]) / 1e6
            lines.append(f"sharded rows: local fraction {self.local_fraction:.4f}, remote-row cache hit rate "
                         f"{self.remote_hit_rate:.4f} (host tier {self.host_hit_rate:.4f}, {host_mb:.2f} MB; device "
                         f"tier {self.device_hit_rate:.4f}, {sh['device_hit_bytes'] / 1e6:.2f} MB); received "
                         f"{sh['wire_bytes'] / 1e6:.2f} MB for "
                         f"{sh['remote_raw_bytes'] / 1e6:.2f} MB of raw rows "
                         f"({sh['wire_bytes'] / max(self.batches, 1) / 1e6:.3f} MB/batch), ids sent "
                         f"{sh['request_bytes'] / 1e6:.2f} MB")
        times = format_table(times, [("stage", "stage", "s"), ("total", "seconds", ".3f"), ("ms", "ms/batch", ".2f")])
        return "\n".join(lines) + "\n\n" + times

    __str__ = table
