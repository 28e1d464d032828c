"""Structure checks of index arrays read from disk or given by a user (offsets, indptr, node tables).

Each check is one vectorized pass that allocates nothing (papers100M's offsets and indptr
hold 111 M entries, its indices 3.2 G), and reports the first bad position so the error
can name it.
"""
from __future__ import annotations

from typing import Optional

import numba
import numpy as np

__all__ = ["first_bad_step", "first_outside", "check_node_table"]

#: entries per step of a check (64 MiB of int64).
STEP = 1 << 23


@numba.njit(cache=True, nogil=True)
def _first_bad_step(values, limit):
    """Blocks are scanned branch-free (vectorized); a block with a bad step is scanned again for its index."""
    n = values.shape[0]
    block = 1 << 14
    for lo in range(0, n - 1, block):
        hi = min(n - 1, lo + block)
        bad = False
        for i in range(lo, hi):  # a negative step wraps above any limit
            bad |= np.uint64(np.int64(values[i + 1]) - np.int64(values[i])) > limit
        if bad:
            for i in range(lo, hi):
                if np.uint64(np.int64(values[i + 1]) - np.int64(values[i])) > limit:
                    return i
    return -1


def first_bad_step(values: np.ndarray, max_step: Optional[int] = None) -> int:
    """Index i of the first step ``values[i + 1] - values[i]`` that is negative or above `max_step`; -1 if none."""
    limit = np.uint64(np.iinfo(np.int64).max if max_step is None else max_step)
    return int(_first_bad_step(values, limit))


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
    shape = getattr(table, "shape", None)
    if shape is None or len(shape) == 0:
        raise ValueError(f"node attribute {name!r} has shape {None if shape is None else tuple(shape)}; accepted: "
                         f"a table with one row per node ({num_nodes} rows)")
    if shape[0] != num_nodes:
        raise ValueError(f"node attribute {name!r} has {shape[0]} rows; the graph has {num_nodes} nodes: "
                         "accepted: one row per node")
