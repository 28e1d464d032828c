"""Structure checks of index arrays read from disk or given by a user (offsets, indptr, edge ids, node tables).

Each check is one vectorized pass that allocates nothing (papers100M's offsets and indptr
hold 111 M entries, its indices 3.2 G), and reports the first bad position so the error
can name it; the check for repeated ids allocates one bit per possible id.
"""
from __future__ import annotations

from typing import Optional

import numba
import numpy as np

from .jit_cache import install as _install_kernel_cache

_install_kernel_cache()  # numba caches this module's kernels per environment (ibp_graph.jit_cache)

__all__ = ["first_bad_step", "first_outside", "first_repeat", "check_node_table"]

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


@numba.njit(cache=True, nogil=True)
def _first_repeat(values, bitmap):
    """One pass setting bit values[i] of `bitmap`; the first i whose bit was already set, else -1."""
    for i in range(values.shape[0]):
        v = np.int64(values[i])
        word, bit = v >> 6, np.uint64(1) << np.uint64(v & 63)
        if bitmap[word] & bit:
            return i
        bitmap[word] |= bit
    return -1


def first_repeat(values: np.ndarray, hi: int) -> int:
    """Index of the first entry of `values` (all in [0, hi): check first_outside first) equal to an earlier one; -1 if none.

    A bitmap pass, hi / 8 bytes (papers100M's 1.6 G edge ids: 200 MB), no sort.
    """
    if values.shape[0] < 2:
        return -1
    return int(_first_repeat(values, np.zeros((max(hi, 1) + 63) >> 6, dtype=np.uint64)))


def check_node_table(name: str, table, num_nodes: int) -> None:
    """Raise ValueError unless node attribute `name` (tensor, array or EncodedTable) has `num_nodes` rows."""
    shape = getattr(table, "shape", None)
    if shape is None or len(shape) == 0:
        raise ValueError(f"node attribute {name!r} has shape {None if shape is None else tuple(shape)}; accepted: "
                         f"a table with one row per node ({num_nodes} rows)")
    if shape[0] != num_nodes:
        raise ValueError(f"node attribute {name!r} has {shape[0]} rows; the graph has {num_nodes} nodes: "
                         "accepted: one row per node")
