"""Multi-hop uniform neighbour sampling with the node/edge layout of PyG's NeighborLoader.

Layout of one :class:`SamplerOutput` (that of pyg-lib's ``neighbor_sample`` with
``csc=True``, directed, non-disjoint, which PyG's NeighborLoader uses by default):

* ``node`` lists the seeds first, exactly as given (duplicates kept, so
  ``node[:len(seeds)] == seeds`` and ``batch_size == len(seeds)``), then, hop by hop,
  every node seen for the first time, in the order of the edges that reach it.
* Each frontier position is sampled on its own. A seed given twice is therefore sampled
  twice, independently, and each copy is the destination (``col``) of its own edges,
  as in pyg-lib. A sampled neighbour equal to a repeated seed maps to the seed's
  *first* position (pyg-lib picks the first or the last depending on graph size).
* Edges are listed hop by hop, frontier position by frontier position, and within one
  position in CSC order (increasing edge id for a graph from
  ``CSCGraph.from_edge_index``), whether sampled or taken whole; pyg-lib leaves sampled
  edges in draw order. ``row`` is the local source (the sampled in-neighbour), ``col``
  the local destination (the frontier node), ``edge`` the column in ``edge_index``.

Options, as PyG's NeighborSampler (pyg-lib) has them:

* ``weight``: per-edge weights; a neighbour is drawn with probability proportional to
  its edge's weight (without replacement: Efraimidis-Spirakis keys ``log(u) / w``; with
  replacement: inverse transform on the cumulative weights). Zero-weight edges are never
  drawn; a node with fewer positive-weight in-edges than the fan-out keeps those only. A
  fan-out of ``-1``, or one at least the in-degree without replacement, takes every
  in-edge whatever its weight, as in the uniform case.
* ``subgraph_type="bidirectional"``: the sampled edges plus their reversals, duplicates
  removed, sorted by (destination, source) (PyG's ``SamplerOutput.to_bidirectional``);
  a reversed edge carries its forward edge's id. ``"induced"``: the same nodes, with every
  edge of the graph between two of them, destination by destination in CSC order (a
  repeated seed's later copies get none). Both report no per-hop counts (None), as PyG.
* ``disjoint=True``: every seed position grows its own tree; a node reached from two
  seeds appears once per tree, and ``batch`` gives each node's seed position.
* Temporal sampling (``node_time`` or ``edge_time``; always disjoint, as PyG): a tree
  whose seed has time ``t`` only takes in-edges whose source node (or edge) has a time
  ``<= t``; ``temporal_strategy="uniform"`` draws among those, ``"last"`` takes the
  latest ``k`` of them (each node's in-edges ordered by time, ties in CSC order).

Randomness is a counter-based hash of (seed, hop, frontier position), so the output
depends only on ``seed`` and the inputs, never on the number of numba threads.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional, Sequence, Union

import numba
import numpy as np
import torch
from numba import prange

from ..threads import use_parallel
from .graph import CSCGraph

__all__ = ["MAX_FANOUT", "NeighborSampler", "SamplerOutput", "SUBGRAPH_TYPES", "TEMPORAL_STRATEGIES",
           "available_memory"]

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


# ----------------------------------------------------------------------------------
# Random numbers: splitmix64 finaliser used as a counter-based generator.

def _mix64_py(z: int) -> int:
    z &= _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _hop_key(seed: int, hop: int) -> np.uint64:
    return np.uint64(_mix64_py(_mix64_py(seed) ^ _mix64_py((hop + 1) * _GOLDEN_INT)))


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


# ----------------------------------------------------------------------------------
# Kernels.

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
def _sample_range_within(indptr, indices, e_id, frontier, valid, use_valid, last, weight, use_weight,
                         offsets, k, replace, hop_key, pos0, src_out, eid_out, lo, hi):
    """Sample the in-edges of frontier[lo:hi] into their slices of src_out / eid_out.

    The node at frontier index i (local id pos0 + i) gets its own random stream, so the
    result does not depend on how the frontier is split among threads. With `use_valid`,
    frontier index i draws from the first valid[i] in-edges of its node only (temporal
    sampling: the edges a seed's time allows, in time order), and `last` takes the last
    of those instead of drawing. With `use_weight`, draws follow `weight` (CSC order).
    """
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
        if k < 0 or ((not replace) and k >= deg):
            for j in range(deg):                   # whole neighbourhood, CSC order
                src_out[o + j] = j
        elif last:                                 # the latest cnt of them
            for j in range(cnt):
                src_out[o + j] = deg - cnt + j
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
            eid_out[o + q] = e_id[p]


@numba.njit(cache=True, nogil=True)
def _sample_range(indptr, indices, e_id, frontier, offsets, k, replace, hop_key, pos0,
                  src_out, eid_out, lo, hi):
    """Sample the in-edges of frontier[lo:hi] into their slices of src_out / eid_out
    (_sample_range_within over every in-edge)."""
    _sample_range_within(indptr, indices, e_id, frontier, offsets[:0], False, False, _NO_WEIGHT, False,
                         offsets, k, replace, hop_key, pos0, src_out, eid_out, lo, hi)


@numba.njit(cache=True, parallel=True, nogil=True)
def _sample_hop_parallel(indptr, indices, e_id, frontier, offsets, k, replace, hop_key,
                         pos0, src_out, eid_out, done):
    n = frontier.shape[0]
    for c in prange((n + _CHUNK - 1) // _CHUNK):
        _sample_range(indptr, indices, e_id, frontier, offsets, k, replace, hop_key, pos0,
                      src_out, eid_out, c * _CHUNK, min(n, (c + 1) * _CHUNK))
        done[c] = True


@numba.njit(cache=True, nogil=True)
def _sample_hop_serial(indptr, indices, e_id, frontier, offsets, k, replace, hop_key,
                       pos0, src_out, eid_out):
    _sample_range(indptr, indices, e_id, frontier, offsets, k, replace, hop_key, pos0,
                  src_out, eid_out, 0, frontier.shape[0])


@numba.njit(cache=True, parallel=True, nogil=True)
def _sample_hop_temporal_parallel(indptr, indices, e_id, frontier, valid, last, offsets, k, replace,
                                  hop_key, pos0, src_out, eid_out, done):
    n = frontier.shape[0]
    for c in prange((n + _CHUNK - 1) // _CHUNK):
        _sample_range_within(indptr, indices, e_id, frontier, valid, True, last, _NO_WEIGHT, False, offsets, k,
                             replace, hop_key, pos0, src_out, eid_out, c * _CHUNK, min(n, (c + 1) * _CHUNK))
        done[c] = True


@numba.njit(cache=True, nogil=True)
def _sample_hop_temporal_serial(indptr, indices, e_id, frontier, valid, last, offsets, k, replace,
                                hop_key, pos0, src_out, eid_out):
    _sample_range_within(indptr, indices, e_id, frontier, valid, True, last, _NO_WEIGHT, False, offsets, k,
                         replace, hop_key, pos0, src_out, eid_out, 0, frontier.shape[0])


@numba.njit(cache=True, nogil=True)
def _valid_counts(indptr, key, frontier, times):
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


@numba.njit(cache=True, inline="always")
def _draw_weighted(state, weight, start, deg, cnt, replace, src_out, o):
    """cnt relative positions in [0, deg) drawn proportionally to weight[start:start + deg] into
    src_out[o:o + cnt]: with replacement by inverse transform on the cumulative weights, without
    by Efraimidis-Spirakis keys log(u) / w (the cnt largest; zero weights never drawn)."""
    if replace:
        cum = np.empty(deg, dtype=np.float64)
        acc = 0.0
        for j in range(deg):
            acc += weight[start + j]
            cum[j] = acc
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
        m = 0
        for j in range(deg):
            state, u = _draw_unit(state)
            w = weight[start + j]
            if w > 0.0:
                keys[m] = np.log(u) / w
                pos[m] = j
                m += 1
        order = np.argsort(-keys[:m])
        for j in range(cnt):
            src_out[o + j] = pos[order[j]]


@numba.njit(cache=True, parallel=True, nogil=True)
def _sample_hop_weighted_parallel(indptr, indices, e_id, weight, frontier, offsets, k, replace,
                                  hop_key, pos0, src_out, eid_out, done):
    n = frontier.shape[0]
    for c in prange((n + _CHUNK - 1) // _CHUNK):
        _sample_range_within(indptr, indices, e_id, frontier, offsets[:0], False, False, weight, True, offsets,
                             k, replace, hop_key, pos0, src_out, eid_out, c * _CHUNK, min(n, (c + 1) * _CHUNK))
        done[c] = True


@numba.njit(cache=True, nogil=True)
def _sample_hop_weighted_serial(indptr, indices, e_id, weight, frontier, offsets, k, replace,
                                hop_key, pos0, src_out, eid_out):
    _sample_range_within(indptr, indices, e_id, frontier, offsets[:0], False, False, weight, True, offsets,
                         k, replace, hop_key, pos0, src_out, eid_out, 0, frontier.shape[0])


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
def _table_put_seeds(seeds):
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
def _table_insert(table, shift, count, nodes, first_local, row_out, new_out):
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
def _induced_edges(indptr, indices, e_id, nodes, table, shift):
    """Every edge between two of `nodes` (local ids from `table`): (row, col, edge), destination
    by destination, each in CSC order; a repeated node's later positions get no edges."""
    total = 0
    for j in range(nodes.shape[0]):
        v = nodes[j]
        if _table_find(table, shift, v) == j:
            total += indptr[v + 1] - indptr[v]
    row = np.empty(total, dtype=np.int64)
    col = np.empty(total, dtype=np.int64)
    edge = np.empty(total, dtype=np.int64)
    m = 0
    for j in range(nodes.shape[0]):
        v = nodes[j]
        if _table_find(table, shift, v) != j:
            continue
        for p in range(indptr[v], indptr[v + 1]):
            r = _table_find(table, shift, indices[p])
            if r >= 0:
                row[m] = r
                col[m] = j
                edge[m] = e_id[p]
                m += 1
    return row[:m], col[:m], edge[:m]


def available_memory() -> int:
    """Bytes this process can still allocate: the system's available memory, lowered by an
    address-space limit (``ulimit -v``) and a cgroup v2 memory limit when set."""
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * page
        except (AttributeError, OSError, ValueError):
            avail = MAX_FANOUT
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            with open("/proc/self/statm") as f:
                avail = min(avail, soft - int(f.read().split()[0]) * page)
    except (ImportError, OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f, open("/sys/fs/cgroup/memory.current") as g:
            limit = f.read().strip()
            if limit != "max":
                avail = min(avail, int(limit) - int(g.read().strip()))
    except (OSError, ValueError):
        pass
    return max(int(avail), 0)


def hop_offsets(what: str, counts: np.ndarray, k: int, replace: bool, max_degree: int,
                parallel: bool) -> np.ndarray:
    """Each frontier position's first output slot (``len(counts) + 1`` cumulative counts, the last
    the hop's edge count), after checking the hop's buffers fit in memory.

    The bound is cheap: a position gets at most min(k, in-degree) edges (``k`` with
    replacement, the in-degree for -1), so only a hop whose bound exceeds 64 MiB has its
    edges counted and compared with :func:`available_memory`; one that does not fit raises
    MemoryError naming `what` (the fan-out) and the bytes before any buffer or kernel.
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
    return offsets


_PARALLEL_KERNELS = (_sample_hop_parallel, _sample_hop_temporal_parallel, _sample_hop_weighted_parallel)


def run_hop(what: str, kernel, n: int, *args) -> None:
    """Run one hop's kernel over a frontier of `n` positions; a parallel one must finish every
    task: numba's workqueue layer drops an error raised inside a task (its ids would stay
    uninitialised memory), so an unfinished task raises MemoryError naming `what`."""
    if not any(kernel is p for p in _PARALLEL_KERNELS):
        kernel(*args)
        return
    done = np.zeros((n + _CHUNK - 1) // _CHUNK, dtype=np.bool_)
    kernel(*args, done)
    if not done.all():
        raise MemoryError(f"{what}: a parallel sampling task failed (out of memory) and its edges were "
                          f"not sampled; {available_memory():,} bytes of memory are available: accepted: "
                          "a smaller fan-out or batch")


# ----------------------------------------------------------------------------------
# Public API.

@dataclass
class SamplerOutput:
    """One sampled subgraph, laid out like ``torch_geometric.sampler.SamplerOutput``.

    ``node``: global ids (int64), seeds first. ``row``/``col``: local source/destination
    indices into ``node`` (``edge_index = stack([row, col])``). ``edge``: global edge
    ids. ``num_sampled_nodes``: seeds, then new nodes per hop (``len == hops + 1``).
    ``num_sampled_edges``: edges per hop (``len == hops``). Both are None for the
    bidirectional and induced subgraphs. ``batch``: the seed position of every node
    (disjoint sampling only, else None).
    """

    node: torch.Tensor
    row: torch.Tensor
    col: torch.Tensor
    edge: torch.Tensor
    num_sampled_nodes: Optional[List[int]]
    num_sampled_edges: Optional[List[int]]
    batch: Optional[torch.Tensor] = None


def _readonly(arr: np.ndarray) -> np.ndarray:
    view = arr.view(np.ndarray)
    view.flags.writeable = False
    return view


def _check_num_neighbors(num_neighbors: Sequence[int]) -> List[int]:
    if not isinstance(num_neighbors, (list, tuple)) or len(num_neighbors) == 0:
        raise ValueError(
            f"num_neighbors must be a non-empty list of ints >= -1 (one per hop), "
            f"got {num_neighbors!r}")
    out = []
    for hop, k in enumerate(num_neighbors):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not -1 <= k <= MAX_FANOUT:
            raise ValueError(
                f"num_neighbors[{hop}] must be an int >= -1 and <= {MAX_FANOUT} (2**63 - 1; "
                f"-1 = all neighbours), got {k!r}")
        out.append(int(k))
    return out


#: subgraph types NeighborSampler accepts (PyG's SubgraphType values).
SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")
#: temporal strategies NeighborSampler accepts (PyG's).
TEMPORAL_STRATEGIES = ("uniform", "last")


def _check_time(name: str, value, count: int) -> Optional[np.ndarray]:
    """Times as a 1-d int64 or float64 array of `count` entries (or None)."""
    if value is None:
        return None
    t = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    if t.dtype == np.bool_ or not (np.issubdtype(t.dtype, np.floating) or np.issubdtype(t.dtype, np.integer)):
        raise TypeError(f"{name} has dtype {t.dtype}; accepted: an integer or float dtype")
    if t.shape != (count,):
        raise ValueError(f"{name} has shape {tuple(t.shape)}; accepted: shape ({count},)")
    t = t.astype(np.int64 if np.issubdtype(t.dtype, np.integer) else np.float64)
    if t.dtype == np.float64 and np.isnan(t).any():
        raise ValueError(f"{name} holds NaN; accepted: comparable times")
    return np.ascontiguousarray(t)


def _check_weight(weight, graph: CSCGraph) -> Optional[np.ndarray]:
    """Edge weights (edge_index order) as float64 in CSC order; non-negative and finite."""
    if weight is None:
        return None
    w = weight.detach().cpu().numpy() if isinstance(weight, torch.Tensor) else np.asarray(weight)
    if w.dtype == np.bool_ or not (np.issubdtype(w.dtype, np.floating) or np.issubdtype(w.dtype, np.integer)):
        raise TypeError(f"weight has dtype {w.dtype}; accepted: a real (float or integer) dtype")
    if w.shape != (graph.num_edges,):
        raise ValueError(f"weight has shape {tuple(w.shape)}; accepted: one weight per edge, "
                         f"shape ({graph.num_edges},)")
    w = w.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    if bad.size:
        raise ValueError(f"weight[{int(bad[0])}]={float(w[bad[0]])!r}; accepted: finite weights >= 0")
    return np.ascontiguousarray(w[graph.e_id])


class NeighborSampler:
    """Multi-hop in-neighbour sampler for a :class:`CSCGraph` (PyG semantics).

    ``num_neighbors[h]`` in-neighbours are drawn per frontier node at hop ``h``
    (``-1``: all of them); without replacement a node with fewer in-neighbours keeps
    them all, with ``replace=True`` exactly ``k`` draws are made (none if it has none).
    Draws are uniform, or proportional to ``weight`` (one per edge, in ``edge_index``
    order) when given. ``subgraph_type`` ("directional", "bidirectional", "induced") and
    ``disjoint`` are PyG's, and so is temporal sampling by ``node_time`` (one time per
    node) or ``edge_time`` (one per edge, ``edge_index`` order) with ``temporal_strategy``
    (see the module docstring).
    ``parallel=True`` spreads the draws over numba's threads; ``parallel=False`` stays on
    the calling thread and gives the same output; ``None`` (default) decides per call:
    parallel in the main process, serial inside DataLoader workers (ibp_graph.threads).
    """

    def __init__(self, graph: CSCGraph, num_neighbors: Sequence[int], *,
                 replace: bool = False, parallel: Optional[bool] = None,
                 weight: Union[torch.Tensor, np.ndarray, None] = None,
                 subgraph_type: str = "directional", disjoint: bool = False,
                 node_time: Union[torch.Tensor, np.ndarray, None] = None,
                 edge_time: Union[torch.Tensor, np.ndarray, None] = None,
                 temporal_strategy: str = "uniform") -> None:
        if not isinstance(graph, CSCGraph):
            raise TypeError(f"graph must be a CSCGraph, got {type(graph).__name__}")
        if not isinstance(replace, bool):
            raise TypeError(f"replace must be a bool, got {replace!r}")
        if parallel is not None and not isinstance(parallel, bool):
            raise TypeError(f"parallel must be None or a bool, got {parallel!r}")
        if subgraph_type not in SUBGRAPH_TYPES:
            raise ValueError(f"subgraph_type={subgraph_type!r} is not accepted; use one of {SUBGRAPH_TYPES}")
        if not isinstance(disjoint, bool):
            raise TypeError(f"disjoint must be a bool, got {disjoint!r}")
        if temporal_strategy not in TEMPORAL_STRATEGIES:
            raise ValueError(f"temporal_strategy={temporal_strategy!r} is not accepted; use one of "
                             f"{TEMPORAL_STRATEGIES}")
        if node_time is not None and edge_time is not None:
            raise ValueError("node_time and edge_time are both given; accepted: one of them (or neither)")
        temporal = node_time is not None or edge_time is not None
        if temporal and weight is not None:
            raise ValueError("weight with temporal sampling (node_time/edge_time) is not accepted; give one")
        disjoint = disjoint or temporal  # as PyG: temporal sampling is disjoint
        if disjoint and subgraph_type == "induced":
            raise ValueError("disjoint=True with subgraph_type='induced' is not accepted (as in PyG); "
                             "use disjoint with 'directional' or 'bidirectional'")
        self.graph = graph
        # Read-only views: in-memory and memory-mapped graphs share one compiled kernel.
        self._csc = tuple(_readonly(a) for a in (graph.indptr, graph.indices, graph.e_id))
        self.num_neighbors = _check_num_neighbors(num_neighbors)
        self._max_degree = int(np.diff(graph.indptr).max()) if graph.num_nodes else 0
        self.replace = replace
        self.parallel = parallel
        self.subgraph_type = subgraph_type
        self.disjoint = disjoint
        self.temporal_strategy = temporal_strategy
        self.node_time = _check_time("node_time", node_time, graph.num_nodes)
        edge_time = _check_time("edge_time", edge_time, graph.num_edges)
        self._tcsc = self._tkey = None
        if temporal:  # each node's in-edges in time order (stable: CSC order among ties)
            key = self.node_time[graph.indices] if edge_time is None else edge_time[graph.e_id]
            dst = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(graph.indptr))
            order = np.lexsort((key, dst))
            self._tcsc = (self._csc[0], _readonly(np.ascontiguousarray(graph.indices[order])),
                          _readonly(np.ascontiguousarray(graph.e_id[order])))
            self._tkey = _readonly(np.ascontiguousarray(key[order]))
        w = _check_weight(weight, graph)
        self._weight = None if w is None else _readonly(w)
        # in-edges of positive weight per node: how many distinct draws a node can give
        if w is None:
            self._positive = None
        else:
            csum = np.concatenate([[0], np.cumsum(w > 0)])
            self._positive = csum[graph.indptr[1:]] - csum[graph.indptr[:-1]]

    def _sample_hop(self, what: str, parallel: bool, indptr, indices, e_id, frontier, *rest) -> None:
        n = frontier.shape[0]
        if self._weight is not None:
            kernel = _sample_hop_weighted_parallel if parallel else _sample_hop_weighted_serial
            return run_hop(what, kernel, n, indptr, indices, e_id, self._weight, frontier, *rest)
        run_hop(what, _sample_hop_parallel if parallel else _sample_hop_serial, n, indptr, indices, e_id,
                frontier, *rest)

    def __repr__(self) -> str:
        return (f"NeighborSampler({self.graph!r}, num_neighbors={self.num_neighbors}, "
                f"replace={self.replace}, parallel={self.parallel}, weighted={self._weight is not None}, "
                f"subgraph_type={self.subgraph_type!r}, disjoint={self.disjoint}, temporal={self.temporal})")

    def _check_seeds(self, seeds: Union[torch.Tensor, np.ndarray]) -> np.ndarray:
        if isinstance(seeds, torch.Tensor):
            if seeds.device.type != "cpu":
                raise ValueError(f"seeds must be on the CPU, got device {seeds.device}")
            if seeds.dtype == torch.bool or seeds.dtype.is_floating_point \
                    or seeds.dtype.is_complex:
                raise TypeError(f"seeds must have an integer dtype, got {seeds.dtype}")
            arr = seeds.detach().numpy()
        elif isinstance(seeds, np.ndarray):
            if seeds.dtype == np.bool_ or not np.issubdtype(seeds.dtype, np.integer):
                raise TypeError(f"seeds must have an integer dtype, got {seeds.dtype}")
            arr = seeds
        else:
            raise TypeError(
                f"seeds must be a 1-d integer torch.Tensor, got {type(seeds).__name__}")
        if arr.ndim != 1:
            raise ValueError(f"seeds must be 1-d, got shape {tuple(arr.shape)}")
        arr = np.ascontiguousarray(arr, dtype=np.int64)
        n = self.graph.num_nodes
        if arr.size:
            lo, hi = int(arr.min()), int(arr.max())
            if lo < 0 or hi >= n:
                raise ValueError(
                    f"seeds contains node id {lo if lo < 0 else hi}, outside the valid "
                    f"range [0, {n}) of the graph")
        return arr

    @property
    def temporal(self) -> bool:
        """Whether the sampler respects node or edge times."""
        return self._tkey is not None

    def _counts(self, frontier: np.ndarray, k: int, valid: Optional[np.ndarray]) -> np.ndarray:
        """How many in-edges each frontier node gets at a hop of fan-out k (temporal: of the
        `valid` first ones)."""
        indptr = self._csc[0]
        deg = indptr[frontier + 1] - indptr[frontier] if valid is None else valid
        if k < 0:
            return deg
        drawable = deg if self._positive is None else self._positive[frontier]
        if self.replace and not (valid is not None and self.temporal_strategy == "last"):
            return np.where(drawable > 0, k, 0).astype(np.int64)
        return np.where(deg <= k, deg, np.minimum(drawable, k))

    def _seed_times(self, seeds: np.ndarray, seed_time) -> np.ndarray:
        if seed_time is None:
            if self.node_time is None:
                raise ValueError("edge-level temporal sampling needs seed_time (the loader's input_time): "
                                 "accepted: one time per seed")
            return self.node_time[seeds]
        return _check_time("seed_time", seed_time, seeds.shape[0]).astype(self._tkey.dtype)

    def sample(self, seeds: Union[torch.Tensor, np.ndarray], *, seed: int,
               seed_time: Union[torch.Tensor, np.ndarray, None] = None) -> SamplerOutput:
        """Sample the multi-hop in-neighbourhood of ``seeds``; same ``seed``, same output.
        Temporal samplers take each seed's time from `seed_time`, else from ``node_time``."""
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {seed!r}")
        # Kernels only see read-only arrays: one compiled version whatever comes in.
        seeds_np = _readonly(self._check_seeds(seeds))
        indptr, indices, e_id = self._csc
        times = self._seed_times(seeds_np, seed_time) if self.temporal else None
        if seed_time is not None and not self.temporal:
            raise ValueError("seed_time is given but the sampler has no node_time or edge_time; accepted: None")
        n_graph = max(self.graph.num_nodes, 1)
        # Disjoint trees: the id table is keyed by tree * num_nodes + node.
        trees = np.arange(seeds_np.shape[0], dtype=np.int64) if self.disjoint else None
        if self.disjoint and seeds_np.shape[0] * n_graph >= 2**62:
            raise ValueError(f"disjoint=True with {seeds_np.shape[0]} seeds on {n_graph} nodes: "
                             "tree * num_nodes must stay below 2**62; use smaller batches")

        nodes: List[np.ndarray] = [seeds_np]
        node_trees: List[np.ndarray] = [trees] if self.disjoint else []
        rows: List[np.ndarray] = []
        cols: List[np.ndarray] = []
        edges: List[np.ndarray] = []
        num_sampled_nodes = [int(seeds_np.shape[0])]
        num_sampled_edges: List[int] = []
        n_nodes = int(seeds_np.shape[0])
        # Seeds keep their positions; a repeated seed's id maps to its first position.
        table, shift, count = _table_put_seeds(trees * n_graph + seeds_np if self.disjoint else seeds_np)
        frontier, frontier_trees, begin = seeds_np, trees, 0
        parallel = use_parallel(2, 2) if self.parallel is None else self.parallel
        for hop, k in enumerate(self.num_neighbors):
            valid = _valid_counts(indptr, self._tkey, frontier, times[frontier_trees]) if self.temporal else None
            counts = self._counts(frontier, k, valid)
            what = f"num_neighbors[{hop}]={k}"
            offsets = hop_offsets(what, counts, k, self.replace, self._max_degree, parallel)
            m = int(offsets[-1])
            src = np.empty(m, dtype=np.int64)
            eid = np.empty(m, dtype=np.int64)
            if m and self.temporal:
                kernel = _sample_hop_temporal_parallel if parallel else _sample_hop_temporal_serial
                run_hop(what, kernel, frontier.shape[0], *self._tcsc, frontier, valid,
                        self.temporal_strategy == "last", offsets, np.int64(k), self.replace,
                        _hop_key(int(seed), hop), np.int64(begin), src, eid)
            elif m:
                self._sample_hop(what, parallel, indptr, indices, e_id, frontier, offsets, np.int64(k),
                                 self.replace, _hop_key(int(seed), hop), np.int64(begin), src, eid)
            col = np.repeat(np.arange(begin, begin + frontier.shape[0], dtype=np.int64),
                            counts)
            keys = src + np.repeat(frontier_trees, counts) * n_graph if self.disjoint else src
            row = np.empty(m, dtype=np.int64)
            new = np.empty(m, dtype=np.int64)
            table, shift, count, n_new = _table_insert(table, shift, count, keys,
                                                       np.int64(n_nodes), row, new)
            new = new[:n_new]
            if self.disjoint:
                frontier_trees = new // n_graph
                new = new % n_graph
                node_trees.append(frontier_trees)
            nodes.append(new)
            rows.append(row)
            cols.append(col)
            edges.append(eid)
            num_sampled_nodes.append(int(n_new))
            num_sampled_edges.append(m)
            frontier, begin = _readonly(new), n_nodes
            n_nodes += int(n_new)

        node = np.concatenate(nodes)
        row, col, edge = np.concatenate(rows), np.concatenate(cols), np.concatenate(edges)
        counts_out: tuple = (num_sampled_nodes, num_sampled_edges)
        if self.subgraph_type == "induced":
            row, col, edge = _induced_edges(indptr, indices, e_id, _readonly(node), table, shift)
            counts_out = (None, None)
        elif self.subgraph_type == "bidirectional":
            row, col, edge = _bidirectional(row, col, edge, max(n_nodes, 1))
            counts_out = (None, None)
        return SamplerOutput(
            node=torch.from_numpy(node),
            row=torch.from_numpy(row),
            col=torch.from_numpy(col),
            edge=torch.from_numpy(edge),
            num_sampled_nodes=counts_out[0],
            num_sampled_edges=counts_out[1],
            batch=torch.from_numpy(np.concatenate(node_trees)) if self.disjoint else None,
        )


def _bidirectional(row: np.ndarray, col: np.ndarray, edge: np.ndarray, n: int):
    """The edges plus their reversals, each (row, col) pair once (its first occurrence, forward
    edges first), sorted by (col, row): PyG's to_bidirectional (coalesce, sort_by_row=False)."""
    r2, c2, e2 = np.concatenate([row, col]), np.concatenate([col, row]), np.concatenate([edge, edge])
    order = np.argsort(c2 * n + r2, kind="stable")
    key = (c2 * n + r2)[order]
    keep = np.ones(key.shape[0], dtype=bool)
    keep[1:] = key[1:] != key[:-1]
    sel = order[keep]
    return r2[sel], c2[sel], e2[sel]
