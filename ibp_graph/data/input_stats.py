"""What a model needs of a feature table for its inputs: the row width and per-column mean and standard deviation
(`feature_stats`, over a seeded random row sample), computed from the raw table or from its pre-encoded store.

The two give bit-identical statistics: the store is lossless, so its decoded sample rows are the raw rows.
`write_shards` records them in shards.json (as float32 bit patterns, `to_hex` / `from_hex`), so that a host of a
sharded run builds its model without the raw table (data/shards.py).
"""
from __future__ import annotations

import re
from typing import NamedTuple, Optional, Sequence

import numpy as np
import torch

__all__ = ["SAMPLE_ROWS", "SEED", "FeatureInput", "feature_stats", "store_stats", "sample_rows", "column_stats",
           "to_hex", "from_hex"]

#: rows of the random sample the statistics are taken over, and the seed that draws it.
SAMPLE_ROWS = 65536
SEED = 0
_HEX32 = re.compile(r"^[0-9a-f]{8}$")


def sample_rows(n: int, rows: int = SAMPLE_ROWS, seed: int = SEED) -> Optional[torch.Tensor]:
    """The ascending ids of the `rows`-row random sample (seeded) of a table of `n` rows; None: every row."""
    if n <= rows:
        return None
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:rows].sort().values


def column_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-column mean and standard deviation (float32, computed in float64) of the rows `x`; std 1 for one row."""
    x = x.double()
    return x.mean(0).float(), x.std(0).float() if x.shape[0] > 1 else torch.ones(x.shape[1])


def feature_stats(x: torch.Tensor, rows: int = SAMPLE_ROWS, seed: int = SEED) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-column mean and standard deviation of (a random row sample of) a CPU feature table."""
    pick = sample_rows(x.shape[0], rows, seed)
    return column_stats(x if pick is None else x.index_select(0, pick))


def store_stats(table, rows: int = SAMPLE_ROWS, seed: int = SEED) -> tuple[torch.Tensor, torch.Tensor]:
    """`feature_stats` of the table a pre-encoded `table` (EncodedTable) holds, bit for bit: the same sample rows,
    gathered compressed and decoded (losslessly)."""
    pick = sample_rows(table.n_rows, rows, seed)
    return column_stats(table.decode_rows(torch.arange(table.n_rows) if pick is None else pick))


class FeatureInput(NamedTuple):
    """What a model needs of one feature table: its row `width`, and the `mean` and `std` it standardises with."""

    width: int
    mean: torch.Tensor
    std: torch.Tensor

    @classmethod
    def of(cls, x: torch.Tensor) -> "FeatureInput":
        """The width and feature_stats of a (rows, width) CPU feature table."""
        return cls(int(x.shape[1]), *feature_stats(x))


def to_hex(values: torch.Tensor) -> list[str]:
    """The float32 `values` as the hex digits of their bit patterns (what JSON keeps exactly, NaN included)."""
    bits = np.ascontiguousarray(values.detach().cpu().numpy(), dtype=np.float32).view(np.uint32)
    return [f"{int(b):08x}" for b in bits.reshape(-1)]


def from_hex(values: Sequence[str]) -> torch.Tensor:
    """The float32 tensor `to_hex` wrote (a ValueError naming the first entry that is not 8 lowercase hex digits)."""
    for i, v in enumerate(values):
        if not isinstance(v, str) or not _HEX32.fullmatch(v):
            raise ValueError(f"entry {i} ({v!r}) is not the 8 lowercase hex digits of a float32 bit pattern")
    return torch.from_numpy(np.array([int(v, 16) for v in values], dtype=np.uint32).view(np.float32))
