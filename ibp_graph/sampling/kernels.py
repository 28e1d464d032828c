"""The kernels of the one neighbour sampler (``sampling.hetero``): counter-based random draws keyed by
(seed, hop, edge type, frontier position) (:func:`hop_key`), one hop's draws per frontier position, the
global-to-local id tables, induced edges, and the memory checks run before a hop's buffers exist."""
from __future__ import annotations

from typing import Optional

import numba
import numpy as np
from numba import prange

from ..resources import available_memory
from ..threads import parallel_slot
from ..jit_cache import install as _install_kernel_cache

_install_kernel_cache()  # numba caches this module's kernels per environment (ibp_graph.jit_cache)

__all__ = ["MAX_FANOUT", "available_memory", "first_infinite_sum", "hop_key", "induced_edges", "readonly",
           "sample_hop", "table_insert", "table_put_seeds", "valid_counts"]

_MASK64 = (1 << 64) - 1
_GOLDEN_INT = 0x9E3779B97F4A7C15
_GOLDEN = np.uint64(_GOLDEN_INT)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)

# Frontier nodes handled by one parallel task; results do not depend on it.
_CHUNK = 64
# The weight argument of kernels that sample uniformly.
_NO_WEIGHT = np.zeros(0, dtype=np.float64)
# Weighted draws (_draw_weighted): a neighbourhood's cumulative weights summing below _TINY_SUM are scaled
# by _TINY_SCALE (u >= 2**-54, so u * sum >= 2**-1022, the smallest normal float, from 2**-968 up; times
# 2**1000 the sum stays below 2**32); a key log(u) / w must lie in (-inf, -_MIN_NORMAL).
_TINY_SUM = 2.0 ** -968
_TINY_SCALE = 2.0 ** 1000
_MIN_NORMAL = 2.0 ** -1022
# Up to this many draws, Floyd's algorithm checks repeats by a linear scan;
# above it, by a per-task open-addressing hash set.
_SCAN_MAX_K = 32
#: the largest fan-out accepted (the kernels count in int64).
MAX_FANOUT = (1 << 63) - 1
# Bytes a hop holds per sampled edge (src, eid, row, col, new, keys: int64 each) and per thread
# per in-edge of the largest neighbourhood (draw hash set, weighted keys and positions).
_BYTES_PER_EDGE = 48
# Hops whose buffers stay below this are not checked against the memory available.
_UNCHECKED_BYTES = 1 << 26


# Random numbers: splitmix64 finaliser used as a counter-based generator.

def _mix64_py(z: int) -> int:
    z &= _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


# mixes an edge type's position into a hop's key (an odd constant, unrelated to the golden ratio)
_TYPE_MIX = 0xD1B54A32D192ED03


def hop_key(seed: int, hop: int, type_pos: Optional[int] = None) -> np.uint64:
    """The random key of one hop (and edge type: its position among the edge types; None mixes nothing,
    as for a homogeneous graph's one edge type)."""
    key = _mix64_py(_mix64_py(seed) ^ _mix64_py((hop + 1) * _GOLDEN_INT))
    if type_pos is not None:
        key = _mix64_py(key ^ _mix64_py((type_pos + 1) * _TYPE_MIX))
    return np.uint64(key)


@numba.njit(cache=True, inline="always")
def _mix64(z):
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@numba.njit(cache=True, inline="always")
def _draw(state, bound):
    """Advance a splitmix64 state; return (new state, integer uniform in [0, bound))."""
    state = state + _GOLDEN
    return state, np.int64(_mix64(state) % np.uint64(bound))


@numba.njit(cache=True, inline="always")
def _draw_unit(state):
    """Advance a splitmix64 state; return (new state, float uniform in (0, 1))."""
    state = state + _GOLDEN
    return state, (np.float64(_mix64(state) >> np.uint64(11)) + 0.5) * (1.0 / 9007199254740992.0)


@numba.njit(cache=True, inline="always")
def _slot(u, shift):
    """Fibonacci hashing: the top (64 - shift) bits of u * golden ratio."""
    return np.int64((np.uint64(u) * _GOLDEN) >> np.uint64(shift))


@numba.njit(cache=True, inline="always")
def _set_add(table, mask, shift, r):
    """Add r >= 0 to an open-addressing set (-1 = empty); False if it was there."""
    h = _slot(r, shift)
    while table[h] != -1:
        if table[h] == r:
            return False
        h = (h + 1) & mask
    table[h] = r
    return True


@numba.njit(cache=True, inline="always")
def _sort_range(a, lo, hi):
    """Sort a[lo:hi] in place (insertion sort for the short ranges of a fan-out)."""
    if hi - lo > _SCAN_MAX_K:
        a[lo:hi].sort()
        return
    for i in range(lo + 1, hi):
        x = a[i]
        j = i - 1
        while j >= lo and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


@numba.njit(cache=True, nogil=True)
def _sample_range(indptr, indices, e_id, frontier, valid, use_valid, last, weight, use_weight,
                  offsets, k, replace, hop_key, pos0, src_out, eid_out, lo, hi):
    """Sample the in-edges of frontier[lo:hi] into their slices of src_out / eid_out (an empty `e_id`:
    the edges' CSC positions, read from no array).

    The node at frontier index i (local id pos0 + i) gets its own random stream, so the
    result does not depend on how the frontier is split among threads. With `use_valid`,
    frontier index i draws from the first valid[i] in-edges of its node only (temporal
    sampling: the edges a seed's time allows, in time order), and with `last` from the
    latest k of those (pyg-lib's window). With `use_weight`, draws follow `weight` (CSC order).
    """
    no_ids = e_id.shape[0] == 0  # no edge ids given (a sampler told edge_ids=False): CSC positions instead
    use_hash = (not replace) and k > _SCAN_MAX_K
    table_bits = 0
    if use_hash:  # sized by the draws made (at most the in-degree), never by the fan-out itself
        most = 0
        for i in range(lo, hi):
            most = max(most, offsets[i + 1] - offsets[i])
        while (1 << table_bits) < 2 * most:
            table_bits += 1
    table = np.empty(1 << table_bits, dtype=np.int64)
    table_mask = (1 << table_bits) - 1
    table_shift = 64 - table_bits
    for i in range(lo, hi):
        o = offsets[i]
        cnt = offsets[i + 1] - o
        if cnt == 0:
            continue
        v = frontier[i]
        start = indptr[v]
        deg = valid[i] if use_valid else indptr[v + 1] - start
        if last and k >= 0 and deg > k:            # the latest k of them
            start += deg - k
            deg = k
        if k < 0 or ((not replace) and k >= deg):
            for j in range(deg):                   # whole neighbourhood, CSC order
                src_out[o + j] = j
        else:
            state = _mix64(hop_key + np.uint64(pos0 + i) * _GOLDEN)
            if use_weight:
                _draw_weighted(state, weight, start, deg, cnt, replace, src_out, o)
            elif replace:
                for j in range(cnt):
                    state, r = _draw(state, deg)
                    src_out[o + j] = r
            elif not use_hash:                     # Floyd, repeats by linear scan
                m = 0
                for j in range(deg - k, deg):
                    state, r = _draw(state, j + 1)
                    for q in range(m):
                        if src_out[o + q] == r:
                            r = j
                            break
                    src_out[o + m] = r
                    m += 1
            else:                                  # Floyd, repeats by hash set
                table[:] = -1
                m = 0
                for j in range(deg - k, deg):
                    state, r = _draw(state, j + 1)
                    if not _set_add(table, table_mask, table_shift, r):
                        r = j                      # j is never in the set yet
                        _set_add(table, table_mask, table_shift, r)
                    src_out[o + m] = r
                    m += 1
            _sort_range(src_out, o, o + cnt)       # canonical order: CSC order
        for q in range(cnt):                       # relative position -> ids
            p = start + src_out[o + q]
            src_out[o + q] = indices[p]
            eid_out[o + q] = p if no_ids else e_id[p]  # no_ids: one cache miss less per edge


@numba.njit(cache=True, parallel=True, nogil=True)
def _sample_hop_parallel(indptr, indices, e_id, frontier, valid, use_valid, last, weight, use_weight, offsets, k,
                         replace, hop_key, pos0, src_out, eid_out, done):
    n = frontier.shape[0]
    for c in prange((n + _CHUNK - 1) // _CHUNK):
        _sample_range(indptr, indices, e_id, frontier, valid, use_valid, last, weight, use_weight, offsets, k,
                      replace, hop_key, pos0, src_out, eid_out, c * _CHUNK, min(n, (c + 1) * _CHUNK))
        done[c] = True


@numba.njit(cache=True, nogil=True)
def valid_counts(indptr, key, frontier, times):
    """For each frontier index i: how many in-edges of frontier[i] have key <= times[i]
    (`key` ascends within each node's range: a binary search)."""
    out = np.empty(frontier.shape[0], dtype=np.int64)
    for i in range(frontier.shape[0]):
        v = frontier[i]
        a, b = indptr[v], indptr[v + 1]
        t = times[i]
        while a < b:
            mid = (a + b) // 2
            if key[mid] <= t:
                a = mid + 1
            else:
                b = mid
        out[i] = a - indptr[v]
    return out


@numba.njit(cache=True, nogil=True)
def first_infinite_sum(indptr, weight):
    """The first destination whose in-edges' weights (float64, CSC order) sum to inf when added as
    :func:`_draw_weighted` adds them with replacement (in order, from 0.0); -1 when every sum is finite."""
    for v in range(indptr.shape[0] - 1):
        acc = 0.0
        for p in range(indptr[v], indptr[v + 1]):
            acc += weight[p]
        if acc == np.inf:
            return v
    return -1


@numba.njit(cache=True, inline="always")
def _weighted_keys(state, weight, start, deg, keys, pos, log_space):
    """Efraimidis-Spirakis keys of the positive weights of weight[start:start + deg] into keys[:m] (their
    relative positions into pos[:m]), one u drawn per edge: log(u) / w, or with `log_space` the same order
    as log(w) - log(-log(u)); (m, whether every key lies in (-inf, -_MIN_NORMAL))."""
    normal = True
    m = 0
    for j in range(deg):
        state, u = _draw_unit(state)
        w = weight[start + j]
        if w > 0.0:
            key = np.log(w) - np.log(-np.log(u)) if log_space else np.log(u) / w
            normal = normal and -np.inf < key < -_MIN_NORMAL
            keys[m] = key
            pos[m] = j
            m += 1
    return m, normal


@numba.njit(cache=True, inline="always")
def _draw_weighted(state, weight, start, deg, cnt, replace, src_out, o):
    """cnt relative positions in [0, deg) drawn proportionally to weight[start:start + deg] (float64) into
    src_out[o:o + cnt]: with replacement by inverse transform on the cumulative weights (their sum must be
    finite: the sampler refuses weights whose sum is not, :func:`first_infinite_sum`), without by
    Efraimidis-Spirakis keys log(u) / w (the cnt largest; zero weights never drawn).

    The arithmetic changes only where float64 would draw wrongly, at the ends of its range (the draws of
    every other neighbourhood are unchanged): cumulative weights summing below _TINY_SUM are scaled by
    _TINY_SCALE (a power of two: exact), so that u * sum is a normal float, not a subnormal one rounded
    to a few values; and a neighbourhood with a key log(u) / w outside the normal floats (-inf for weights
    below ~2e-307, 0 or subnormal for weights near 1.8e308: ties and lost digits) is keyed again, from the
    same u, by log(w) - log(-log(u)), which orders the edges as log(u) / w does and is always finite."""
    if replace:
        cum = np.empty(deg, dtype=np.float64)
        acc = 0.0
        for j in range(deg):
            acc += weight[start + j]
            cum[j] = acc
        if acc < _TINY_SUM:
            acc *= _TINY_SCALE
            for j in range(deg):
                cum[j] *= _TINY_SCALE
        for j in range(cnt):
            state, u = _draw_unit(state)
            t = u * acc
            a, b = 0, deg - 1
            while a < b:
                mid = (a + b) // 2
                if cum[mid] > t:
                    b = mid
                else:
                    a = mid + 1
            while weight[start + a] <= 0.0 and a > 0:  # rounding at the top end
                a -= 1
            src_out[o + j] = a
    else:
        keys = np.empty(deg, dtype=np.float64)
        pos = np.empty(deg, dtype=np.int64)
        m, normal = _weighted_keys(state, weight, start, deg, keys, pos, False)
        if not normal:  # the same u again, keyed in log space
            m, normal = _weighted_keys(state, weight, start, deg, keys, pos, True)
        order = np.argsort(-keys[:m])
        for j in range(cnt):
            src_out[o + j] = pos[order[j]]


# Global id -> local id: open addressing with linear probing in one int64 array of
# (key, value) pairs, key -1 = empty; kept at most half full by doubling.

@numba.njit(cache=True, nogil=True)
def _table_new(min_entries):
    bits = 4
    while (1 << bits) < 2 * min_entries:
        bits += 1
    return np.full(2 << bits, -1, dtype=np.int64), 64 - bits


@numba.njit(cache=True, nogil=True)
def _table_grow(table, shift):
    size = table.shape[0] // 2
    new, new_shift = _table_new(size)
    mask = new.shape[0] // 2 - 1
    for s in range(size):
        key = table[2 * s]
        if key != -1:
            h = _slot(key, new_shift)
            while new[2 * h] != -1:
                h = (h + 1) & mask
            new[2 * h] = key
            new[2 * h + 1] = table[2 * s + 1]
    return new, new_shift


@numba.njit(cache=True, nogil=True)
def table_put_seeds(seeds):
    """A table mapping each seed to its position (the first one, for a repeated seed)."""
    table, shift = _table_new(max(16, 4 * seeds.shape[0]))
    mask = table.shape[0] // 2 - 1
    count = 0
    for i in range(seeds.shape[0]):
        u = seeds[i]
        h = _slot(u, shift)
        while table[2 * h] != -1 and table[2 * h] != u:
            h = (h + 1) & mask
        if table[2 * h] == -1:
            table[2 * h] = u
            table[2 * h + 1] = i
            count += 1
    return table, shift, count


@numba.njit(cache=True, nogil=True)
def table_insert(table, shift, count, nodes, first_local, row_out, new_out):
    """Look up nodes[i] (global ids); an unseen id gets the next local id, from first_local.

    row_out[i] receives the local id of nodes[i]; unseen ids are appended to new_out in
    order. Returns (table, shift, count, number of new ids).
    """
    n_new = 0
    mask = table.shape[0] // 2 - 1
    for j in range(nodes.shape[0]):
        if 2 * (count + 1) > mask + 1:
            table, shift = _table_grow(table, shift)
            mask = table.shape[0] // 2 - 1
        u = nodes[j]
        h = _slot(u, shift)
        while True:
            key = table[2 * h]
            if key == u:
                row_out[j] = table[2 * h + 1]
                break
            if key == -1:
                table[2 * h] = u
                table[2 * h + 1] = first_local + n_new
                row_out[j] = first_local + n_new
                new_out[n_new] = u
                n_new += 1
                count += 1
                break
            h = (h + 1) & mask
    return table, shift, count, n_new


@numba.njit(cache=True, nogil=True)
def _table_find(table, shift, u):
    """The local id of global id u, or -1 when u is not in the table."""
    mask = table.shape[0] // 2 - 1
    h = _slot(u, shift)
    while True:
        key = table[2 * h]
        if key == u:
            return table[2 * h + 1]
        if key == -1:
            return -1
        h = (h + 1) & mask


@numba.njit(cache=True, nogil=True)
def induced_edges(indptr, indices, e_id, dst_nodes, src_table, src_shift, dst_table, dst_shift, first_only):
    """Every in-edge of dst_nodes whose source is in `src_table`: (row, col, edge), destination position
    by destination position, each in CSC order; with `first_only` a repeated destination's later
    positions (those `dst_table` does not map it to) get none."""
    total = 0
    for i in range(dst_nodes.shape[0]):
        v = dst_nodes[i]
        total += indptr[v + 1] - indptr[v]
    row = np.empty(total, dtype=np.int64)
    col = np.empty(total, dtype=np.int64)
    eid = np.empty(total, dtype=np.int64)
    no_ids = e_id.shape[0] == 0  # as in _sample_range
    m = 0
    for i in range(dst_nodes.shape[0]):
        v = dst_nodes[i]
        if first_only and _table_find(dst_table, dst_shift, v) != i:
            continue
        for p in range(indptr[v], indptr[v + 1]):
            r = _table_find(src_table, src_shift, indices[p])
            if r >= 0:
                row[m] = r
                col[m] = i
                eid[m] = p if no_ids else e_id[p]
                m += 1
    return row[:m], col[:m], eid[:m]


def sample_hop(what: str, parallel: bool, csc, frontier, counts, k: int, replace: bool, max_degree: int,
               key: tuple, pos0: int, valid=None, last: bool = False, weight=None) -> tuple[np.ndarray, np.ndarray]:
    """One hop's in-edges of `frontier` (``csc``: a graph's indptr, indices, e_id), `counts[i]` for
    position i: (sources, edge ids), position by position; keyed by ``hop_key(*key)``, temporal (the
    first `valid` in-edges per position, in time order; `last`: the latest k of them) when `valid` is
    given, weighted when `weight` is.

    The buffers are checked first, cheaply: a position gets at most min(k, in-degree) edges (``k``
    with replacement, the in-degree for -1), so only a hop whose bound exceeds 64 MiB has its edges
    counted and compared with :func:`available_memory`; one that does not fit raises MemoryError
    naming `what` (the fan-out) and the bytes before any buffer or kernel. A parallel run must finish
    every task: numba's workqueue layer drops an error raised inside a task (its ids would stay
    uninitialised memory), so an unfinished task raises MemoryError naming `what`.
    """
    per = max_degree if k < 0 else k if replace else min(k, max_degree)
    n = counts.shape[0]
    if n * per * _BYTES_PER_EDGE > _UNCHECKED_BYTES:
        m = int(counts.sum()) if n * per < 1 << 62 else int(counts.sum(dtype=np.float64))
        threads = numba.get_num_threads() if parallel else 1
        need = m * _BYTES_PER_EDGE + threads * _BYTES_PER_EDGE * min(per, max_degree)
        if need > _UNCHECKED_BYTES:
            avail = available_memory()
            if m >= 1 << 62 or need > avail:
                raise MemoryError(
                    f"{what} would sample {m:,} edges from {n:,} frontier nodes: its buffers take {need:,} "
                    f"bytes, more than the {avail:,} bytes of memory available; accepted: a fan-out "
                    "whose edges fit in memory (without replacement each node gives at most its "
                    "in-degree)")
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    m = int(offsets[-1])
    src, eid = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
    if not m:
        return src, eid
    args = (*csc, frontier, offsets[:0] if valid is None else valid, valid is not None, last,
            _NO_WEIGHT if weight is None else weight, weight is not None, offsets, np.int64(k), replace,
            hop_key(*key), np.int64(pos0), src, eid)
    with parallel_slot(parallel) as free:  # one parallel kernel at a time in a process (ibp_graph.threads)
        if not free:
            _sample_range(*args, 0, n)
            return src, eid
        done = np.zeros((n + _CHUNK - 1) // _CHUNK, dtype=np.bool_)
        _sample_hop_parallel(*args, done)
    if not done.all():
        raise MemoryError(f"{what}: a parallel sampling task failed (out of memory) and its edges were "
                          f"not sampled; {available_memory():,} bytes of memory are available: accepted: "
                          "a smaller fan-out or batch")
    return src, eid


def readonly(arr: np.ndarray) -> np.ndarray:
    """A read-only view of `arr`: kernels see only read-only arrays, one compiled version whatever comes in."""
    view = arr.view(np.ndarray)
    view.flags.writeable = False
    return view
