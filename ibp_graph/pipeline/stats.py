"""Bytes and stage times of a loader: per group raw vs sent bytes, seconds per pipeline stage."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ..tables import format_table

#: pipeline stages in data-flow order; worker stages first.
STAGES = ("sample", "gather", "encode", "copy", "decode")
#: where feature rows served by the main process came from (pipeline.features): compressed bytes per tier.
TIERS = ("device_cache", "zero_copy", "worker")


@dataclass
class LoaderStats:
    """Running totals over the batches a loader has produced (reset with reset())."""

    batches: int = 0
    raw_bytes: dict = field(default_factory=lambda: defaultdict(int))
    sent_bytes: dict = field(default_factory=lambda: defaultdict(int))
    seconds: dict = field(default_factory=lambda: defaultdict(float))
    #: host bytes the workers wrote into new buffers (gathers, group concatenation, encode output).
    copied_bytes: int = 0
    #: the codec of each group, by the group's printed name ("ibp", "identity (fallback: ...)").
    codecs: dict = field(default_factory=dict)
    #: rows of cached feature tables found in / missing from the device cache (pipeline.cache).
    cache_hits: int = 0
    cache_misses: int = 0
    #: compressed bytes of the main-process-served feature rows, per tier (TIERS).
    tier_bytes: dict = field(default_factory=lambda: {t: 0 for t in TIERS})
    #: the device caches' capacity (Capacity.as_dict() per attribute), set by the loader; not reset.
    cache: dict = field(default_factory=dict)
    #: what the loader says about its batches as a whole (e.g. that nothing is compressed); not reset.
    note: str = ""

    def add_tiers(self, hits: int, misses: int, cache_bytes: int, zero_copy_bytes: int, *,
                  worker: int = 0) -> None:
        """Count one batch's served feature rows: cache hits and misses, compressed bytes per tier."""
        self.cache_hits += int(hits)
        self.cache_misses += int(misses)
        for tier, n in zip(TIERS, (cache_bytes, zero_copy_bytes, worker)):
            self.tier_bytes[tier] += int(n)

    @property
    def serves_features(self) -> bool:
        """Whether feature rows were served by the main process (zero-copy, device cache) or a cache is set."""
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
        self.batches = 0
        self.raw_bytes.clear()
        self.sent_bytes.clear()
        self.seconds.clear()
        self.copied_bytes = 0
        self.cache_hits = self.cache_misses = 0
        self.tier_bytes = {t: 0 for t in TIERS}

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
        return out

    def table(self) -> str:
        """Two tables: bytes per group, and seconds per stage."""
        rows = [{"group": k, "raw_mb": self.raw_bytes[k] / 1e6, "sent_mb": self.sent_bytes[k] / 1e6,
                 "fraction": self.sent_bytes[k] / self.raw_bytes[k] if self.raw_bytes[k] else 1.0,
                 "codec": self.codecs.get(k, "")}
                for k in sorted(self.raw_bytes)]
        rows.append({"group": "total", "raw_mb": self.total_raw_bytes / 1e6,
                     "sent_mb": self.total_sent_bytes / 1e6, "fraction": self.fraction, "codec": ""})
        columns = [("group", "group", "s"), ("raw_mb", "raw MB", ".2f"),
                   ("sent_mb", "sent MB", ".2f"), ("fraction", "fraction", ".4f")]
        bytes_t = format_table(rows, columns + ([("codec", "codec", "s")] if self.codecs else []))
        n = max(self.batches, 1)
        times = [{"stage": s, "total": self.seconds.get(s, 0.0), "per_batch": self.seconds.get(s, 0.0) / n * 1e3}
                 for s in STAGES]
        time_t = format_table(times, [("stage", "stage", "s"), ("total", "seconds", ".3f"),
                                      ("per_batch", "ms/batch", ".2f")])
        copied = f"host bytes copied in workers: {self.copied_bytes_per_batch / 1e6:.2f} MB/batch"
        tiers = ""
        if self.serves_features:
            tiers = ("\nfeature rows served by the main process, MB: " + ", ".join(
                f"{t} {self.tier_bytes[t] / 1e6:.2f}" for t in TIERS) +
                f"; device cache hit rate {self.hit_rate:.4f}" +
                "".join(f"\ndevice cache {k}: {c['rows']:,} rows compressed ({c['raw_rows']:,} raw) "
                        f"in {c['budget_bytes'] / 1e6:.1f} MB" for k, c in self.cache.items()))
        note = f"{self.note}\n" if self.note else ""
        return f"{note}{self.batches} batches\n{bytes_t}\n{copied}{tiers}\n\n{time_t}"

    def __str__(self) -> str:
        return self.table()
