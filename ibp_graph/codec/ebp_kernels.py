"""CPU kernels of the EBP row format (docs/format.md, "EBP row format"), compiled with numba.

Fit helpers (code lengths, per-column table search), the row encoder and the row decoder.
Bit I/O, unaligned 64-bit loads/stores and the parallel/serial switch come from
``bitpack``; like there, every kernel exists as a parallel build (main process) and a
serial build (DataLoader workers), picked by ``bitpack.parallel_ok``.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange
from numba.core import types
from numba.extending import intrinsic

from .base import PAYLOAD_TAIL
from .bitpack import (_copy, _get, _ld8, _ld16, _ld32, _ld64, _pdep, _pext, _put, _st8, _st64,
                      offsets_from_lengths, parallel_ok)

#: longest code (bits); the decode table of a column has 2**LUT_BITS entries.
LUT_BITS = 8
#: entries of a decode table (one per value of the next LUT_BITS stream bits)
LUT_SIZE = 1 << LUT_BITS
#: dictionary index that means "escape: the high part is stored verbatim".
ESC = 255
#: most dictionary entries of one table (indices 0..254).
MAX_DICT = 255
#: high parts below 2**ENC_BITS are looked up directly when encoding; larger ones are searched.
ENC_BITS = 12
#: rows the decoder sorts into raw/sparse and dense (decoded four at a time) per task
DEC_BLOCK = 256
#: decode-table entry of a bit pattern no code starts with (only possible in a corrupt table).
BAD_ENTRY = 0xFFFF

_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@intrinsic
def _ctz64(typingctx, x):
    """Trailing zero count of a uint64 (64 for 0)."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))

    return sig, codegen


@njit(inline="always")
def _lowmask(n):
    """The n low bits set, 0 <= n <= 64."""
    if n >= 64:
        return _ALL
    return (_ONE << np.uint64(n)) - _ONE


@njit(inline="always")
def _bitlen(v):
    """Bits needed for v >= 0 (0 for 0)."""
    b = 0
    while v > 0:
        v >>= 1
        b += 1
    return b


@njit(inline="always")
def _put_gamma(op, acc, nacc, v, limit):
    """Elias-gamma code of v >= 1 (v < 2**32): b-1 zeros, a one, then the b-1 bits under v's top bit."""
    b = _bitlen(v)
    uv = np.uint64(v)
    top = _ONE << np.uint64(b - 1)
    code = top | ((uv ^ top) << np.uint64(b))
    return _put(op, acc, nacc, code, 2 * b - 1, limit)


@njit(inline="always")
def _get_gamma(row, p):
    """(v, new p) of a gamma code at bit p; v = 0 marks an invalid code (more than 31 zeros)."""
    w = _get(row, p, 64)
    z = int(_ctz64(w))
    if z > 31:
        return 0, p
    v = (1 << z) | int((w >> np.uint64(z + 1)) & _lowmask(z))
    return v, p + 2 * z + 1


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


#: multiplier of the encoder's hash of high parts (Fibonacci hashing).
_HASH_MUL = np.uint64(0x9E3779B97F4A7C15)
#: flag of an occupied slot in an encode hash table.
_SLOT_USED = 1 << 15


@njit(inline="always")
def _hash(hi):
    return np.int64((hi * _HASH_MUL) >> np.uint64(40))


@njit(cache=True)
def build_code_tables(t_size, t_esc, t_len, t_dict, sizes, elut_off):
    """Canonical codes and the lookup tables of every table (docs/format.md, EBP codes).

    Returns (codes, dlut, elut, hpairs, hoff, hmask, esc_entry): codes[t, idx] the code of
    dictionary index idx (255: the escape) bit-reversed for the LSB-first stream; dlut[t,
    bits] the decode entry idx | length << 8 of the code the next LUT_BITS stream bits
    start with (BAD_ENTRY if none); elut the direct encode entries (code | length << 8 |
    escape << 12) of the high parts below sizes[t], at elut_off[t]; hpairs the (value,
    entry | _SLOT_USED) slots of an open-addressing hash table per table (at hoff[t],
    hmask[t] + 1 slots) for the high parts beyond the direct range; esc_entry[t] the escape's
    encode entry.
    """
    T = t_size.shape[0]
    codes = np.zeros((T, 256), dtype=np.int64)
    dlut = np.full((T, 1 << LUT_BITS), BAD_ENTRY, dtype=np.uint16)
    total = 0
    for t in range(T):
        total += sizes[t]
    elut = np.zeros(total + 4, dtype=np.uint16)  # +4: the encoder loads 8 bytes
    hoff = np.zeros(T, dtype=np.int64)
    hmask = np.zeros(T, dtype=np.int64)
    hslots = 0
    for t in range(T):
        h = 4
        while h < 2 * (t_size[t] + 1):
            h *= 2
        hoff[t] = hslots
        hmask[t] = h - 1
        hslots += h
    hpairs = np.zeros((hslots, 2), dtype=np.uint64)
    esc_entry = np.zeros(T, dtype=np.int64)
    syms = np.empty(256, dtype=np.int64)
    keys = np.empty(256, dtype=np.int64)
    for t in range(T):
        n_dict = t_size[t]
        m = 0
        for k in range(n_dict):
            syms[m] = k
            keys[m] = t_len[t, k] * 256 + k
            m += 1
        if t_esc[t]:
            syms[m] = ESC
            keys[m] = t_len[t, ESC] * 256 + ESC
            m += 1
        order = np.argsort(keys[:m], kind="mergesort")  # by length, then index
        code = 0
        prev = t_len[t, syms[order[0]]] if m else 0
        for q in range(m):
            idx = syms[order[q]]
            ln = t_len[t, idx]
            code <<= ln - prev
            prev = ln
            rev = 0
            c = code
            for _ in range(ln):
                rev = (rev << 1) | (c & 1)
                c >>= 1
            code += 1
            codes[t, idx] = rev
            entry = idx | (ln << 8)
            for f in range(1 << (LUT_BITS - ln)):
                dlut[t, rev | (f << ln)] = entry
        esc = 0
        if t_esc[t]:
            esc = codes[t, ESC] | (t_len[t, ESC] << 8) | (1 << 12)
        esc_entry[t] = esc
        base = elut_off[t]
        for v in range(sizes[t]):
            elut[base + v] = esc
        for k in range(n_dict):
            v = t_dict[t, k]
            ent = codes[t, k] | (t_len[t, k] << 8)
            if v < np.uint64(sizes[t]):
                elut[base + np.int64(v)] = ent
            slot = _hash(v) & hmask[t]
            while hpairs[hoff[t] + slot, 1] != 0:
                slot = (slot + 1) & hmask[t]
            hpairs[hoff[t] + slot, 0] = v
            hpairs[hoff[t] + slot, 1] = ent | _SLOT_USED
    return codes, dlut, elut, hpairs, hoff, hmask, esc_entry


@njit(inline="always")
def _entry(hi, elut_addr, hp_base, fp):
    """Encode entry of high part hi: reversed code | length << 8 | escape << 12.

    fp is the address of a column's five table fields in colp (elut offset, direct-lookup
    limit, hash-table offset, hash mask, escape entry: C_D.. or C_S..). Below the limit one
    direct lookup; above it a probe of the table's open-addressing hash table. Scalars only:
    numba reference-counts array arguments on every call.
    """
    if hi < _ld64(fp + 8):
        return np.int64(_ld16(elut_addr + 2 * (np.int64(_ld64(fp)) + np.int64(hi))))
    return _hashed_entry(hi, hp_base, fp)


@njit(inline="never", cache=True, nogil=True)
def _hashed_entry(hi, hp_base, fp):
    """_entry for a high part beyond the direct-lookup range: a hash-table probe."""
    base = hp_base + 16 * np.int64(_ld64(fp + 16))
    mask = np.int64(_ld64(fp + 24))
    slot = _hash(hi) & mask
    while True:
        e = np.int64(_ld64(base + 16 * slot + 8))
        if e == 0:  # an empty slot: not in the dictionary
            return np.int64(_ld64(fp + 32))
        if _ld64(base + 16 * slot) == hi:
            return e & 0x7FFF
        slot = (slot + 1) & mask


@njit(inline="always")
def _gamma_bits(v):
    return 2 * _bitlen(v) - 1


# Per-column parameters (colp: int64 columns; colm: uint64 columns). C_D and C_S start the
# five table fields _entry reads for the column's dense and sparse table.
C_LW, C_TID, C_TIDS, C_HSHIFT, C_D, C_S, C_DDEF, C_DDEFE, C_DMIN = 0, 1, 2, 3, 4, 9, 14, 15, 16
#: columns of colp
N_COLP = 17
F_EOFF, F_DLIM, F_HOFF, F_HMASK, F_ESCE = range(5)
M_HIMASK, M_DEFAULT = range(2)


@njit(inline="always")
def _load_chunk(raddr, k, nfull, ntail):
    """64-bit chunk k of a row at address raddr (the partial last chunk read byte by byte)."""
    if k < nfull:
        return _ld64(raddr + 8 * k)
    w = _ZERO
    for b in range(ntail):
        w |= np.uint64(_ld8(raddr + 8 * k + b)) << np.uint64(8 * b)
    return w


@njit(inline="always")
def _ld_elem(addr, wb):
    """Element of wb bytes (1, 2, 4 or 8; a compile-time constant) at addr, as uint64."""
    if wb == 8:
        return _ld64(addr)
    if wb == 4:
        return _ld32(addr)
    if wb == 2:
        return _ld16(addr)
    return _ld8(addr)


#: fields of EBPTables.drec, one 32-byte record per column for the dense code writer:
#: low bits (the shift to the high part), direct-lookup limit, byte offset of the column's
#: encode-table entries in elut (encode_rows passes a copy holding their address instead),
#: high-part mask
R_SHIFT, R_DLIM, R_EADDR, R_HIMASK = 0, 8, 16, 24
_REC_BYTES = 32


@njit(inline="always")
def _dense_entry(h, rp, sva, fp):
    """Encode entry of high part h of the column whose drec record is at rp (fp: its colp
    table fields, for the hash probe beyond the direct range)."""
    if h < _ld64(rp + R_DLIM):
        return np.int64(_ld16(np.int64(_ld64(rp + R_EADDR)) + 2 * np.int64(h)))
    return _hashed_entry(h, sva, fp)


def _make_dense_codes(wb: int):
    """The dense code-stream writer for elements of wb bytes (a compile-time constant)."""

    @njit(inline="never", cache=True, nogil=True)
    def dense_codes(wrow, d, rec, direct, cpa, cstride, sva, escp, cop, cacc, cn, clim):
        """Append the dense codes of the row at wrow to the code stream; every high part goes
        to escp[ne], which advances on escapes only. Returns (cop, cacc, cn, ne).

        A function of its own (scalars only, never inlined, one per element width) so that
        its loop gets the registers to itself. The column's record (drec) gives the shift,
        the direct-lookup limit and the address of its entries, so a direct lookup is one
        16-bit load; up to 8 codes (8 bits at most each) are gathered per write.
        """
        ne = 0
        wp = wrow
        rp = rec
        j = 0
        while j < d:
            j1 = min(d, j + 8)
            cv = _ZERO
            ln = 0
            while j < j1:
                h = _ld_elem(wp, wb) >> _ld64(rp + R_SHIFT)
                if wb == 8:  # a shift of 64 (no high part) is stored as 0: mask it off
                    h &= _ld64(rp + R_HIMASK)
                if direct:  # every column's high parts lie in its direct table
                    e = np.int64(_ld16(np.int64(_ld64(rp + R_EADDR)) + 2 * np.int64(h)))
                else:
                    e = _dense_entry(h, rp, sva, cpa + j * cstride + 8 * C_D)
                _st64(escp + 8 * ne, h)
                ne += e >> 12
                cv |= np.uint64(e & 0xFF) << np.uint64(ln)
                ln += (e >> 8) & 0xF
                wp += wb
                rp += _REC_BYTES
                j += 1
            cop, cacc, cn = _put(cop, cacc, cn, cv, ln, clim)
        return cop, cacc, cn, ne

    return dense_codes


_dense_codes1, _dense_codes2, _dense_codes4, _dense_codes8 = (
    _make_dense_codes(1), _make_dense_codes(2), _make_dense_codes(4), _make_dense_codes(8))


def _encode_impl(words, rows, n_chunks, row_nbytes, W, sparse, HE, LS, IB, low_total, colp, colm,
                 drec, direct, wmask, wbits, elut, hpairs, tmp, lengths, scratch):
    """Encode every row; chunk c's rows go back to back into tmp from row_start(c) * row_nbytes.

    scratch (n_chunks, 2, scratch_bytes): chunk c's row and code-stream buffers. They are
    arguments, not local arrays, because they are written through raw addresses: numba may
    free a local array after its last use as an array.
    """
    scratch_bytes = scratch.shape[2]
    n, d = words.shape
    per = (n + n_chunks - 1) // n_chunks
    nfull = row_nbytes >> 3
    ntail = row_nbytes & 7
    nck = wmask.shape[0]
    HS = W - LS
    ls_sh = np.uint64(LS & 63)
    lomask_s = _lowmask(LS)
    himask_s = _lowmask(HS)
    ea = np.int64(elut.ctypes.data)
    sva = np.int64(hpairs.ctypes.data)
    cpa = np.int64(colp.ctypes.data)
    cstride = 8 * colp.shape[1]
    ra = np.int64(rows.ctypes.data)
    ta = np.int64(tmp.ctypes.data)
    wa = np.int64(words.ctypes.data)
    wb = words.itemsize
    rca = np.int64(drec.ctypes.data)
    ddef_bits = 0
    ddef_esc = 0
    for j in range(d):
        ddef_bits += colp[j, C_DDEF]
        ddef_esc += colp[j, C_DDEFE]
    for c in prange(n_chunks):
        a = c * per
        b = min(n, a + per)
        if a >= b:
            continue
        sbase = np.int64(scratch.ctypes.data) + c * 2 * scratch_bytes
        cbase = sbase + scratch_bytes
        slim = sbase + scratch_bytes
        clim = cbase + scratch_bytes
        m = max(d, 1)
        esc = np.empty(m, dtype=np.uint64)
        nz_idx = np.empty(m + 1, dtype=np.int64)
        nz_e = np.empty(m, dtype=np.int64)
        nz_hi = np.empty(m, dtype=np.uint64)
        pos = a * row_nbytes
        for i in range(a, b):
            use_sparse = False
            nnz = 0
            if sparse:
                sp_bits = 1
                ne_s = 0
                # the elements off their column's default (branch-free compaction) ...
                for j in range(d):
                    nz_idx[nnz] = j
                    nnz += np.uint64(words[i, j]) != colm[j, M_DEFAULT]
                # ... their sparse codes and sparse cost, and a lower bound of the dense cost:
                # every column's default code (precomputed sum), each listed element's code
                # at least its table's shortest, escapes only those not listed
                lb_bits = 1 + low_total + ddef_bits
                lb_esc = ddef_esc
                for k in range(nnz):
                    j = nz_idx[k]
                    his = (np.uint64(words[i, j]) >> ls_sh) & himask_s
                    es = _entry(his, ea, sva, cpa + j * cstride + 8 * C_S)
                    nz_e[k] = es
                    nz_hi[k] = his
                    sp_bits += (es >> 8) & 0xF
                    ne_s += es >> 12
                    lb_bits += colp[j, C_DMIN] - colp[j, C_DDEF]
                    lb_esc -= colp[j, C_DDEFE]
                sp_bits += nnz * (IB + LS) + _gamma_bits(nnz + 1) + _gamma_bits(ne_s + 1) + \
                    ne_s * HS
                lb_bits += _gamma_bits(lb_esc + 1) + lb_esc * HE
                # the exact dense cost only when the bound does not settle it (the choice is
                # the same: sparse exactly when it takes fewer bits than dense)
                use_sparse = sp_bits < lb_bits
                if not use_sparse:
                    dense_bits = 1 + low_total + ddef_bits
                    ne_d = ddef_esc
                    for k in range(nnz):
                        j = nz_idx[k]
                        hi = (np.uint64(words[i, j]) >> np.uint64(colp[j, C_LW] & 63)) \
                            & colm[j, M_HIMASK]
                        e = _entry(hi, ea, sva, cpa + j * cstride + 8 * C_D)
                        dense_bits += ((e >> 8) & 0xF) - colp[j, C_DDEF]
                        ne_d += (e >> 12) - colp[j, C_DDEFE]
                    dense_bits += _gamma_bits(ne_d + 1) + ne_d * HE
                    use_sparse = sp_bits < dense_bits
            op = sbase
            acc = _ZERO
            nacc = 0
            cop = cbase
            cacc = _ZERO
            cn = 0
            if not use_sparse:
                if sparse:
                    op, acc, nacc = _put(op, acc, nacc, _ZERO, 1, slim)
                # low stream: the low bits of a 64-bit chunk of the row in one pext
                raddr = ra + i * row_nbytes
                for k in range(nck):
                    w = _load_chunk(raddr, k, nfull, ntail)
                    op, acc, nacc = _put(op, acc, nacc, _pext(w, wmask[k]), wbits[k], slim)
                args = (wa + i * d * wb, d, rca, direct, cpa, cstride, sva,
                        np.int64(esc.ctypes.data), cop, cacc, cn, clim)
                if wb == 4:
                    cop, cacc, cn, ne = _dense_codes4(*args)
                elif wb == 2:
                    cop, cacc, cn, ne = _dense_codes2(*args)
                elif wb == 8:
                    cop, cacc, cn, ne = _dense_codes8(*args)
                else:
                    cop, cacc, cn, ne = _dense_codes1(*args)
                op, acc, nacc = _put_gamma(op, acc, nacc, ne + 1, slim)
                for k in range(ne):
                    op, acc, nacc = _put(op, acc, nacc, esc[k], HE, slim)
            else:
                op, acc, nacc = _put(op, acc, nacc, _ONE, 1, slim)
                op, acc, nacc = _put_gamma(op, acc, nacc, nnz + 1, slim)
                ne = 0
                for k in range(nnz):
                    ne += nz_e[k] >> 12
                op, acc, nacc = _put_gamma(op, acc, nacc, ne + 1, slim)
                for k in range(nnz):
                    op, acc, nacc = _put(op, acc, nacc, np.uint64(nz_idx[k]), IB, slim)
                for k in range(nnz):
                    x = np.uint64(words[i, nz_idx[k]])
                    op, acc, nacc = _put(op, acc, nacc, x & lomask_s, LS, slim)
                for k in range(nnz):
                    if nz_e[k] >> 12:
                        op, acc, nacc = _put(op, acc, nacc, nz_hi[k], HS, slim)
                for k in range(nnz):
                    e = nz_e[k]
                    cop, cacc, cn = _put(cop, cacc, cn, np.uint64(e & 0xFF), (e >> 8) & 0xF,
                                         clim)
            # append the code stream
            for q in range(cbase, cop, 8):
                op, acc, nacc = _put(op, acc, nacc, _ld64(q), 64, slim)
            op, acc, nacc = _put(op, acc, nacc, cacc, cn, slim)
            _st64(op, acc)
            L = ((op - sbase) * 8 + nacc + 7) >> 3
            src = sbase
            if L >= row_nbytes:
                src = ra + i * row_nbytes
                L = row_nbytes
            _copy(ta + pos, src, L)
            lengths[i] = L
            pos += L


def _compact_impl(tmp, n_chunks, n, row_nbytes, offsets, out):
    """Move chunk c's rows from tmp (at row_start(c) * row_nbytes) to out at their offsets."""
    per = (n + n_chunks - 1) // n_chunks
    ta = np.int64(tmp.ctypes.data)
    oa = np.int64(out.ctypes.data)
    for c in prange(n_chunks):
        a = c * per
        b = min(n, a + per)
        if a >= b:
            continue
        _copy(oa + offsets[a], ta + a * row_nbytes, offsets[b] - offsets[a])


# --------------------------------------------------------------------------- decode
@njit(inline="always")
def _dense_start(row, p, d, low_total, HE):
    """(ne, escape-area bit, code-stream bit) of a dense row whose low stream starts at bit
    p; ne = -1 when the escape count is corrupt."""
    v, q = _get_gamma(row, p + low_total)
    ne = v - 1
    if v == 0 or ne > d:
        return -1, 0, 0
    return ne, q, q + ne * HE


@njit(inline="always")
def _dense_code(row, win, pc, pe, used, ne, HE, lut, tda, t):
    """One dense code: (high part, window, code bit, escapes used), used = -1 if corrupt.

    win holds the row's code stream from bit pc; lut is the column's decode table, t its
    table (for the dictionary); escaped high parts are read from bit pe, HE bits each.
    """
    e = np.int64(_ld16(lut + 2 * np.int64(win & np.uint64(0xFF))))
    idx = e & 0xFF
    if idx == ESC:  # an escape, or no code at all (BAD_ENTRY's low byte is ESC too): one test
        if e == BAD_ENTRY or used >= ne:
            return _ZERO, win, pc, -1
        return _get(row, pe + used * HE, HE), win >> np.uint64(e >> 8), pc + (e >> 8), used + 1
    return _ld64(tda + 8 * (LUT_SIZE * t + idx)), win >> np.uint64(e >> 8), pc + (e >> 8), used


@njit(inline="never", cache=True, nogil=True)
def _dense_quad(r0, o0, p0, r1, o1, p1, r2, o2, p2, r3, o3, p3, d, low_total, HE, nck, nfull,
                ntail, epc, wma, wba, cpa, cstride, da, tda):
    """Decode four dense rows (row address, output address, low-stream bit) in lockstep.

    One row's codes form a dependency chain (where a code starts depends on the previous
    code's length, through a table load); four rows give the core four independent chains,
    and all four read the same column's table at each step, so it stays in L1. Returns the
    code-stream end bit of each row (-1 for a row found corrupt: then the others' output
    is incomplete too). The same row may be passed more than once. Scalars only and never
    inlined: one compiled copy serves every caller (inlined, the decoder took minutes to
    compile).
    """
    n0, e0, c0 = _dense_start(r0, p0, d, low_total, HE)
    n1, e1, c1 = _dense_start(r1, p1, d, low_total, HE)
    n2, e2, c2 = _dense_start(r2, p2, d, low_total, HE)
    n3, e3, c3 = _dense_start(r3, p3, d, low_total, HE)
    if n0 < 0 or n1 < 0 or n2 < 0 or n3 < 0:
        return -1, -1, -1, -1
    u0 = u1 = u2 = u3 = 0
    for k in range(nck):
        nb = np.int64(_ld64(wba + 8 * k))
        m = _ld64(wma + 8 * k)
        x0 = _pdep(_get(r0, p0, nb), m)
        x1 = _pdep(_get(r1, p1, nb), m)
        x2 = _pdep(_get(r2, p2, nb), m)
        x3 = _pdep(_get(r3, p3, nb), m)
        p0 += nb
        p1 += nb
        p2 += nb
        p3 += nb
        w0 = _get(r0, c0, 64)
        w1 = _get(r1, c1, 64)
        w2 = _get(r2, c2, 64)
        w3 = _get(r3, c3, 64)
        for j in range(k * epc, min(d, k * epc + epc)):
            cp = cpa + j * cstride
            t = np.int64(_ld64(cp + 8 * C_TID))
            sh = _ld64(cp + 8 * C_HSHIFT)
            lut = da + 2 * LUT_SIZE * t
            h0, w0, c0, u0 = _dense_code(r0, w0, c0, e0, u0, n0, HE, lut, tda, t)
            h1, w1, c1, u1 = _dense_code(r1, w1, c1, e1, u1, n1, HE, lut, tda, t)
            h2, w2, c2, u2 = _dense_code(r2, w2, c2, e2, u2, n2, HE, lut, tda, t)
            h3, w3, c3, u3 = _dense_code(r3, w3, c3, e3, u3, n3, HE, lut, tda, t)
            if (u0 | u1 | u2 | u3) < 0:
                return -1, -1, -1, -1
            x0 |= h0 << sh
            x1 |= h1 << sh
            x2 |= h2 << sh
            x3 |= h3 << sh
        if k < nfull:
            _st64(o0 + 8 * k, x0)
            _st64(o1 + 8 * k, x1)
            _st64(o2 + 8 * k, x2)
            _st64(o3 + 8 * k, x3)
        else:
            for q in range(ntail):
                _st8(o0 + 8 * k + q, x0 >> np.uint64(8 * q))
                _st8(o1 + 8 * k + q, x1 >> np.uint64(8 * q))
                _st8(o2 + 8 * k + q, x2 >> np.uint64(8 * q))
                _st8(o3 + 8 * k + q, x3 >> np.uint64(8 * q))
    return (c0 if u0 == n0 else -1, c1 if u1 == n1 else -1, c2 if u2 == n2 else -1,
            c3 if u3 == n3 else -1)


@njit(inline="always")
def _decode_row(i, payload, offsets, words, rows, row_nbytes, sparse, HE, LS, IB, low_total, colp,
                colm, dlut, tdict, bad, base, oa, nck, nfull, ntail, epc, HS, wma, wba, cpa, cstride,
                da, tda):
    """Decode row i alone (raw, dense or sparse); bad[i] = 1 if it is corrupt."""
    n, d = words.shape
    start = offsets[i]
    L = offsets[i + 1] - start
    row = base + start
    if L == row_nbytes:
        _copy(oa + i * row_nbytes, row, row_nbytes)
        return
    p = 0
    mode = 0
    if sparse:
        mode = int(_get(row, 0, 1))
        p = 1
    ok = True
    if mode == 0:
        o = oa + i * row_nbytes
        end = _dense_quad(row, o, p, row, o, p, row, o, p, row, o, p, d, low_total, HE, nck, nfull,
                          ntail, epc, wma, wba, cpa, cstride, da, tda)[0]
        if end < 0 or (end + 7) >> 3 != L:
            bad[i] = 1
        return
    v, p = _get_gamma(row, p)
    nnz = v - 1
    if v == 0 or nnz > d:
        bad[i] = 1
        return
    v, p = _get_gamma(row, p)
    ne = v - 1
    if v == 0 or ne > nnz:
        bad[i] = 1
        return
    for j in range(d):
        words[i, j] = colm[j, M_DEFAULT]
    ppos = p
    plow = ppos + nnz * IB
    pesc = plow + nnz * LS
    pc = pesc + ne * HS
    used = 0
    prev = -1
    for k in range(nnz):
        j = int(_get(row, ppos + k * IB, IB))
        if j <= prev or j >= d:
            ok = False
            break
        prev = j
        t = colp[j, C_TIDS]
        e = int(dlut[t, int(_get(row, pc, LUT_BITS))])
        if e == BAD_ENTRY:
            ok = False
            break
        pc += e >> 8
        idx = e & 0xFF
        if idx == ESC:
            if used >= ne:
                ok = False
                break
            hi = _get(row, pesc + used * HS, HS)
            used += 1
        else:
            hi = tdict[t, idx]
        lo = _get(row, plow + k * LS, LS)
        if LS < 64:
            lo |= hi << np.uint64(LS)
        words[i, j] = lo
    if not ok or used != ne or (pc + 7) >> 3 != L:
        bad[i] = 1


def _decode_impl(payload, offsets, words, rows, row_nbytes, W, sparse, HE, LS, IB, low_total,
                 colp, colm, wmask, wbits, dlut, tdict, bad):
    """Decode every row into rows (n, row_nbytes) (words: its element view); bad[i] = 1 if corrupt.

    Rows go in blocks of DEC_BLOCK: the block's dense rows four at a time in lockstep
    (_dense_quad), then raw and sparse rows one by one, with the rows of any group that
    held a corrupt row (decoded again alone, so only that row is reported).
    """
    n, d = words.shape
    base = np.int64(payload.ctypes.data)
    oa = np.int64(rows.ctypes.data)
    nck = wmask.shape[0]
    nfull = row_nbytes >> 3
    ntail = row_nbytes & 7
    epc = 64 // W
    HS = W - LS
    wma = np.int64(wmask.ctypes.data)
    wba = np.int64(wbits.ctypes.data)
    cpa = np.int64(colp.ctypes.data)
    cstride = 8 * colp.shape[1]
    da = np.int64(dlut.ctypes.data)
    tda = np.int64(tdict.ctypes.data)
    p = 1 if sparse else 0
    for blk in prange((n + DEC_BLOCK - 1) // DEC_BLOCK):
        a = blk * DEC_BLOCK
        b = min(n, a + DEC_BLOCK)
        dense = np.empty(DEC_BLOCK, dtype=np.int64)
        alone = np.empty(DEC_BLOCK, dtype=np.int64)  # raw, sparse, and groups with a bad row
        nd = 0
        na = 0
        for i in range(a, b):
            if offsets[i + 1] - offsets[i] != row_nbytes and (
                    not sparse or _get(base + offsets[i], 0, 1) == _ZERO):
                dense[nd] = i
                nd += 1
            else:
                alone[na] = i
                na += 1
        for q in range(0, nd, 4):
            i0 = dense[q]
            i1 = dense[min(q + 1, nd - 1)]  # fewer than four left: the last one repeats
            i2 = dense[min(q + 2, nd - 1)]
            i3 = dense[min(q + 3, nd - 1)]
            ends = _dense_quad(base + offsets[i0], oa + i0 * row_nbytes, p,
                               base + offsets[i1], oa + i1 * row_nbytes, p,
                               base + offsets[i2], oa + i2 * row_nbytes, p,
                               base + offsets[i3], oa + i3 * row_nbytes, p,
                               d, low_total, HE, nck, nfull, ntail, epc, wma, wba, cpa, cstride,
                               da, tda)
            ok = True
            for r, end in ((i0, ends[0]), (i1, ends[1]), (i2, ends[2]), (i3, ends[3])):
                if end < 0 or (end + 7) >> 3 != offsets[r + 1] - offsets[r]:
                    ok = False
            if not ok:
                for r in dense[q:min(q + 4, nd)]:
                    alone[na] = r
                    na += 1
        for k in range(na):
            _decode_row(alone[k], payload, offsets, words, rows, row_nbytes, sparse, HE, LS, IB,
                        low_total, colp, colm, dlut, tdict, bad, base, oa, nck, nfull, ntail, epc,
                        HS, wma, wba, cpa, cstride, da, tda)


def _build(fn):
    return (njit(parallel=True, cache=True, nogil=True)(fn), njit(cache=True, nogil=True)(fn))


_encode = _build(_encode_impl)
_compact = _build(_compact_impl)
_decode = _build(_decode_impl)


def _pick(kernels, n_rows):
    return kernels[0] if parallel_ok(n_rows) else kernels[1]


# --------------------------------------------------------------------------- API
def encode_rows(words: np.ndarray, rows: np.ndarray, t) -> tuple[np.ndarray, np.ndarray]:
    """(payload, offsets) of rows given as (n, d) element words and their (n, row_nbytes) bytes."""
    n = words.shape[0]
    rb = t.row_nbytes
    par = parallel_ok(n)
    n_chunks = max(1, min(n, 4 * _threads())) if par else 1
    # Room for every row raw (only the pages written are ever touched) plus the tail.
    tmp = np.empty(n * rb + PAYLOAD_TAIL + 8, dtype=np.uint8)
    lengths = np.zeros(n, dtype=np.int64)
    drec = t.drec.copy()  # entry offsets -> addresses, valid while t.elut lives (this call)
    drec[:, R_EADDR // 8] += np.uint64(t.elut.ctypes.data)
    (_encode[0] if par else _encode[1])(
        words, rows, n_chunks, rb, t.W, t.sparse, t.HE, t.LS, t.IB, t.low_total, t.colp, t.colm,
        drec, t.all_direct, t.wmask, t.wbits, t.elut, t.hpairs, tmp, lengths,
        np.zeros((n_chunks, 2, t.scratch_bytes), dtype=np.uint8))
    offsets, padded = offsets_from_lengths(lengths)
    if n_chunks == 1:
        # one chunk wrote the rows back to back from 0: tmp is the payload; shrink it in
        # place (realloc, no copy) and zero its tail
        total = int(offsets[-1])
        tmp.resize(padded, refcheck=False)
        tmp[total:] = 0
        return tmp, offsets
    out = np.zeros(padded, dtype=np.uint8)
    _compact[0](tmp, n_chunks, n, rb, offsets, out)
    return out, offsets


def row_lengths(words: np.ndarray, rows: np.ndarray, t) -> np.ndarray:
    """Stored bytes of every row (raw rows report row_nbytes)."""
    _, offsets = encode_rows(words, rows, t)
    return np.diff(offsets.astype(np.int64))


def decode_rows(payload: np.ndarray, offsets: np.ndarray, words: np.ndarray, rows: np.ndarray,
                t) -> np.ndarray:
    """Decode into words (n, d) (rows: its byte view); return the indices of corrupt rows."""
    n = words.shape[0]
    bad = np.zeros(n, dtype=np.uint8)
    _pick(_decode, n)(payload, offsets, words, rows, t.row_nbytes, t.W, t.sparse, t.HE, t.LS,
                      t.IB, t.low_total, t.colp, t.colm, t.wmask, t.wbits, t.dlut, t.t_dict, bad)
    return np.flatnonzero(bad)


def _threads() -> int:
    import numba

    return numba.get_num_threads()
