"""Fitting EBP code tables (numba): length-limited Huffman code lengths, and per column the
split into verbatim low bits and coded high part that costs the fewest bits on a sample."""
from __future__ import annotations

import numpy as np
from numba import njit

from .codes import MAX_DICT
from ...jit_cache import install as _install_kernel_cache

_install_kernel_cache()  # numba caches this module's kernels per environment (ibp_graph.jit_cache)

_ZERO = np.uint64(0)


# --------------------------------------------------------------------------- code lengths
@njit(cache=True)
def huffman_lengths(weights, lmax):
    """Code lengths of an optimal prefix code for `weights` (> 0), none longer than lmax.

    Huffman's construction (two queues over the weights sorted ascending, ties by index), then,
    if a code is longer than lmax, the length-count adjustment of JPEG (ITU T.81, K.3) and the
    lengths reassigned shortest-first to the heaviest symbols. One symbol gets length 0.
    Deterministic: equal weights keep their index order.
    """
    m = weights.shape[0]
    out = np.zeros(m, dtype=np.int64)
    if m <= 1:
        return out
    order = np.argsort(weights, kind="mergesort")
    w = np.empty(2 * m - 1, dtype=np.float64)
    parent = np.full(2 * m - 1, -1, dtype=np.int64)
    for k in range(m):
        w[k] = weights[order[k]]
    li = 0          # next leaf (leaves are 0..m-1 in ascending weight)
    ni = m          # next internal node to take
    nn = m          # next internal node to create
    for _ in range(m - 1):
        pick = np.empty(2, dtype=np.int64)
        for s in range(2):
            if li < m and (ni >= nn or w[li] <= w[ni]):
                pick[s] = li
                li += 1
            else:
                pick[s] = ni
                ni += 1
        w[nn] = w[pick[0]] + w[pick[1]]
        parent[pick[0]] = nn
        parent[pick[1]] = nn
        nn += 1
    depth = np.zeros(2 * m - 1, dtype=np.int64)
    for k in range(2 * m - 3, -1, -1):  # root is 2m-2; parents are created after children
        depth[k] = depth[parent[k]] + 1
    maxlen = 0
    for k in range(m):
        maxlen = max(maxlen, depth[k])
    if maxlen <= lmax:
        for k in range(m):
            out[order[k]] = depth[k]
        return out
    # counts per length, then move the too-long codes up (K.3 "Adjust_BITS")
    bl = np.zeros(maxlen + 2, dtype=np.int64)
    for k in range(m):
        bl[depth[k]] += 1
    for i in range(maxlen, lmax, -1):
        while bl[i] > 0:
            j = i - 2
            while bl[j] == 0:
                j -= 1
            bl[i] -= 2
            bl[i - 1] += 1
            bl[j + 1] += 2
            bl[j] -= 1
    # heaviest symbol first gets the shortest length
    k = m - 1
    for ln in range(1, lmax + 1):
        for _ in range(bl[ln]):
            out[order[k]] = ln
            k -= 1
    return out


@njit(cache=True)
def _hi_runs(vals, segs, lw, cap, out_v, out_c):
    """Distinct values of v >> lw over the sorted segments [segs[2k], segs[2k+1]) of vals.

    Writes values and counts to out_v/out_c; returns how many, or -1 once more than cap.
    """
    m = 0
    have = False
    last = _ZERO
    shift = np.uint64(min(lw, 63))
    for s in range(segs.shape[0] // 2):
        for i in range(segs[2 * s], segs[2 * s + 1]):
            h = _ZERO if lw >= 64 else vals[i] >> shift
            if have and h == last:
                out_c[m - 1] += 1
            else:
                if m >= cap:
                    return -1
                out_v[m] = h
                out_c[m] = 1
                m += 1
                last = h
                have = True
    return m


@njit(cache=True)
def _table_cost(hv, hc, m, hw, lmax):
    """(bits, dict order, lengths, escape weight) of the best table for high parts (hv, hc).

    The dictionary holds the MAX_DICT most frequent values (ties: smaller value first); an
    escape code exists unless the dictionary holds every possible value (all 2**hw). bits
    counts the codes, plus the verbatim high parts of escaped values (hw bits each).
    """
    n = 0
    for k in range(m):
        n += hc[k]
    # most frequent first, ties by value (hv is ascending, so a stable sort on -count)
    order = np.argsort(-hc[:m], kind="mergesort")
    keep = min(m, MAX_DICT)
    esc_n = n
    for k in range(keep):
        esc_n -= hc[order[k]]
    need_esc = hw > 0 and (hw >= 8 or keep < (1 << hw))
    leaves = keep + (1 if need_esc else 0)
    w = np.empty(leaves, dtype=np.int64)
    for k in range(keep):
        w[k] = hc[order[k]]
    if need_esc:
        w[keep] = max(esc_n, 1)
    lens = huffman_lengths(w, lmax)
    bits = 0
    for k in range(keep):
        bits += hc[order[k]] * lens[k]
    if need_esc:
        bits += esc_n * (lens[keep] + hw)
    return bits, order[:keep].copy(), lens, need_esc


@njit(cache=True)
def best_split(vals, segs, W, lmax, lw_min, lw_max, cap):
    """(lw, bits) minimising the bits of one column's values: low lw bits verbatim, the rest coded.

    vals: the column's sample values (uint64) sorted ascending, restricted to segs.
    Candidates lw_min..lw_max; a candidate whose high parts take more than cap distinct
    values is skipped (its dictionary would miss most of them), except lw = W.
    """
    n = 0
    for s in range(segs.shape[0] // 2):
        n += segs[2 * s + 1] - segs[2 * s]
    hv = np.empty(cap, dtype=np.uint64)
    hc = np.empty(cap, dtype=np.int64)
    best_lw = W
    best_bits = np.int64(W) * n
    for lw in range(lw_max, lw_min - 1, -1):
        m = _hi_runs(vals, segs, lw, cap, hv, hc)
        if m < 0:
            break  # fewer low bits only makes more distinct high parts
        bits = np.int64(0)
        if m > 0:
            bits, _, _, _ = _table_cost(hv, hc, m, W - lw, lmax)
        bits += np.int64(lw) * n
        if bits < best_bits:
            best_bits = bits
            best_lw = lw
    return best_lw, best_bits


@njit(cache=True)
def split_bits(vals, segs, W, lmax, lw, cap):
    """Bits of the column's values with lw low bits verbatim, or -1 if the high parts take more than cap values."""
    n = 0
    for s in range(segs.shape[0] // 2):
        n += segs[2 * s + 1] - segs[2 * s]
    hv = np.empty(cap, dtype=np.uint64)
    hc = np.empty(cap, dtype=np.int64)
    m = _hi_runs(vals, segs, lw, cap, hv, hc)
    if m < 0:
        return np.int64(-1)
    bits = np.int64(0)
    if m > 0:
        bits, _, _, _ = _table_cost(hv, hc, m, W - lw, lmax)
    return bits + np.int64(lw) * n


@njit(cache=True)
def build_table(vals, segs, lw, W, lmax):
    """(dictionary values, code lengths (escape last if present), has escape) for one table."""
    n = 0
    for s in range(segs.shape[0] // 2):
        n += segs[2 * s + 1] - segs[2 * s]
    cap = max(n, 1)
    hv = np.empty(cap, dtype=np.uint64)
    hc = np.empty(cap, dtype=np.int64)
    m = _hi_runs(vals, segs, lw, cap, hv, hc)
    hw = W - lw
    if m == 0:  # no sample: a table that codes 0 and escapes the rest
        hv[0] = 0
        hc[0] = 1
        m = 1
    _, order, lens, esc = _table_cost(hv, hc, m, hw, lmax)
    keep = order.shape[0]
    dvals = np.empty(keep, dtype=np.uint64)
    for k in range(keep):
        dvals[k] = hv[order[k]]
    return dvals, lens, esc
