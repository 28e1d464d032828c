"""Structure checks of index arrays read from disk or given by a user (offsets, indptr, node tables).

Each check is one vectorized pass in bounded-memory chunks (papers100M's offsets and
indptr hold 111 M entries, its indices 3.2 G), and reports the first bad position so
the error can name it.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

__all__ = ["first_bad_step", "first_outside", "check_node_table"]

#: entries per step of a check (64 MiB of int64).
STEP = 1 << 23


def first_bad_step(values: np.ndarray, max_step: Optional[int] = None) -> int:
    """Index i of the first step ``values[i + 1] - values[i]`` that is negative or above `max_step`; -1 if none."""
    n = values.shape[0]
    for lo in range(0, max(n - 1, 0), STEP):
        hi = min(n, lo + STEP + 1)
        d = np.diff(values[lo:hi].astype(np.int64, copy=False))
        bad = d < 0 if max_step is None else (d < 0) | (d > max_step)
        if bad.any():
            return lo + int(np.argmax(bad))
    return -1


def first_outside(values: np.ndarray, lo: int, hi: int) -> int:
    """Index of the first entry of `values` outside [lo, hi); -1 if none."""
    n = values.shape[0]
    for a in range(0, n, STEP):
        c = values[a:a + STEP]
        if c.size and (int(c.min()) < lo or int(c.max()) >= hi):
            return a + int(np.argmax((c < lo) | (c >= hi)))
    return -1


def check_node_table(name: str, table, num_nodes: int) -> None:
    """Raise ValueError unless node attribute `name` (tensor, array or EncodedTable) has `num_nodes` rows."""
    rows = table.shape[0] if getattr(table, "shape", None) else None
    if rows is None:
        raise ValueError(f"node attribute {name!r} has shape {getattr(table, 'shape', None)}; accepted: "
                         f"a table with one row per node ({num_nodes} rows)")
    if rows != num_nodes:
        raise ValueError(f"node attribute {name!r} has {rows} rows; the graph has {num_nodes} nodes: "
                         "accepted: one row per node")
