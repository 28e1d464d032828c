"""CPU decoder of the EBP row format (docs/format.md, "EBP row format"), compiled with numba.

Dense rows are decoded four at a time in lockstep (_dense_quad); raw and sparse rows, and
any group that held a corrupt row, one by one (_decode_row), so exactly the corrupt rows
are reported.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ...layout.bitstream import (build_kernels, clz64, copy_bytes, get_bits, ld16, ld64, pdep,
                                 pick_kernel, prefetch_write, st8, st64)
from ...layout.rows import NO_DEST, padded_end, row_address
from .codes import BAD_ENTRY, DEC_BLOCK, ESC, LUT_BITS, LUT_SIZE
from .stream import get_gamma
from .tables import C_HSHIFT, C_TID, C_TIDS, M_DEFAULT, EBPTables
from ...jit_cache import install as _install_kernel_cache

_install_kernel_cache()  # numba caches this module's kernels per environment (ibp_graph.jit_cache)

_ONE = np.uint64(1)
_ZERO = np.uint64(0)


# --------------------------------------------------------------------------- decode
@njit(inline="always")
def _dense_start(row, p, d, low_total, HE):
    """(ne, escape-area bit, code-stream bit) of a dense row whose low stream starts at bit
    p; ne = -1 when the escape count is corrupt (escapes where no table has one: HE = 0)."""
    v, q = get_gamma(row, p + low_total)
    ne = v - 1
    if v == 0 or ne > d or (ne > 0 and HE == 0):
        return -1, 0, 0
    return ne, q, q + ne * HE


#: a word's low bits are read with one 8-byte load when they span at most this many bits
#: (the load starts at the byte holding the first one, so up to 7 bits below it are skipped)
_ONE_LOAD_BITS = 57

#: stream bits a code window holds: 57, the fewest one 8-byte load gives at any bit offset
_WINDOW_BITS = 57

#: codes decoded from one window (codes are at most LUT_BITS long)
_WINDOW_CODES = _WINDOW_BITS // LUT_BITS

#: the bit above a window's stream bits: as codes are shifted out it moves down, so the
#: window's leading zeros tell how many bits were used (clz - _CLZ_UNUSED)
_SENTINEL = np.uint64(1 << _WINDOW_BITS)
_WINDOW_MASK = np.uint64((1 << _WINDOW_BITS) - 1)
_CLZ_UNUSED = 63 - _WINDOW_BITS

#: quads ahead whose output rows are prefetched for writing. A quad stores its rows' words one at a
#: time between long dependency chains, and a store to a line not in cache (a batch larger than the
#: last-level cache, or rows sent to scattered positions) stalled the chains: 434k rows decoded at
#: 1.2-1.35 GB/s per core, against 2.2-2.5 for a batch whose output stays in cache
#: (scripts/bench_decode.py; with the prefetch ~1.9-2.0). Prefetching the compressed rows gained nothing.
PREFETCH_QUADS = 2

#: escape cursor of a row found corrupt: past any code-stream start, so it stays corrupt
_CORRUPT = np.int64(1) << 62

#: the most stream bits one window refill skips (clz64 of a window is at most 64)
_MAX_SKIP = 64 - _CLZ_UNUSED


@njit(inline="always")
def row_reach(W, sparse, d, low_total, HE, IB):
    """The most bytes decoding a compressed row reads from its start, whatever the row holds (a corrupt
    row's counts, escape area and codes may claim bits far past its end; every load reads 16 bytes at most
    from where it starts). A dense row: its escape count starts at bit g = mode + low_total and takes at
    most 63 bits, its escape area at most d * HE, and the last of its ceil(d / _WINDOW_CODES) windows
    starts at most that many refills less one of _MAX_SKIP bits later. A sparse row: its two counts take
    at most 2 * 63 bits after the mode bit, at most d listed elements IB + W bits each (column, low bits,
    escaped high part), then at most d codes of up to LUT_BITS bits."""
    p = 1 if sparse else 0
    dense = ((p + low_total + 63 + d * HE + _MAX_SKIP * (-(-d // _WINDOW_CODES) - 1)) >> 3) + 16
    if not sparse:
        return dense
    return max(dense, ((1 + 2 * 63 + d * (IB + W + LUT_BITS)) >> 3) + 16)


@njit(inline="always")
def _refill(row, c, w):
    """(code-stream bit, new window) of a row whose window w was read from bit c: the bits
    w used are skipped, the next _WINDOW_BITS are read, the sentinel put above them."""
    c += np.int64(clz64(w)) - _CLZ_UNUSED
    return c, ((ld64(row + (c >> 3)) >> np.uint64(c & 7)) & _WINDOW_MASK) | _SENTINEL


@njit(inline="always")
def _low_bits(row, b, s, nb, m):
    """The word whose low bits (nb of them, at the set bits of m) start at bit 8 * b + s."""
    if nb <= _ONE_LOAD_BITS:
        return pdep(ld64(row + b) >> np.uint64(s), m)  # pdep takes only the nb low bits
    return pdep(get_bits(row, 8 * b + s, nb), m)


@njit(inline="always")
def _escape(row, f, h, e, s, HE):
    """(high part, escape cursor) of a code with decode entry f and dictionary value h: h
    itself unless f is an escape, then the high part at the escape cursor e, which may not
    reach s (the code stream's start). A row found corrupt (no code starts with these bits,
    or one escape too many) gets e = _CORRUPT and goes on being decoded as garbage."""
    if (f & 0xFF) != ESC:
        return h, e
    if f == BAD_ENTRY or e >= s:
        return _ZERO, _CORRUPT
    return get_bits(row, e, HE), e + HE


@njit(inline="never", cache=True, nogil=True)
def _dense_quad(r0, o0, r1, o1, r2, o2, r3, o3, p, d, low_total, HE, nfull, ntail, epc, wma, wba,
                cia):
    """Decode four dense rows (row address, output address; low stream at bit p) in lockstep.

    One row's codes form a dependency chain (where a code starts depends on the previous
    code's length, through a table load); four rows give the core four independent chains,
    and all four read the same column's table at each step. cia is the address of the
    per-column (decode table, dictionary, high-part shift) triples (_column_info). Each
    row's code stream is read through a window of _WINDOW_BITS bits refilled every
    _WINDOW_CODES columns (_refill: its sentinel counts the bits used, so the code loop
    keeps no bit position); the low bits of each 64-bit output word come from their static
    bit position (the same for the four rows) with one load and a pdep. A row's escape
    cursor (e*) runs up to the start of its code stream (s*). Returns the code-stream end
    bit of each row, -1 for a corrupt one. The same row may be passed more than once.
    Scalars only and never inlined: one compiled copy serves every caller (inlined, the
    decoder took minutes to compile).
    """
    n0, e0, c0 = _dense_start(r0, p, d, low_total, HE)
    n1, e1, c1 = _dense_start(r1, p, d, low_total, HE)
    n2, e2, c2 = _dense_start(r2, p, d, low_total, HE)
    n3, e3, c3 = _dense_start(r3, p, d, low_total, HE)
    if n0 < 0 or n1 < 0 or n2 < 0 or n3 < 0:
        return -1, -1, -1, -1
    s0, s1, s2, s3 = c0, c1, c2, c3
    w0 = w1 = w2 = w3 = _SENTINEL  # empty windows read from c*
    x0 = x1 = x2 = x3 = _ZERO
    emask = epc - 1
    pk = p  # the low-stream bit of output word k
    k = 0
    left = 0  # codes left in the windows
    for j in range(d):
        if left == 0:
            c0, w0 = _refill(r0, c0, w0)
            c1, w1 = _refill(r1, c1, w1)
            c2, w2 = _refill(r2, c2, w2)
            c3, w3 = _refill(r3, c3, w3)
            left = _WINDOW_CODES
        left -= 1
        if (j & emask) == 0:  # a new output word: its low bits
            nb = np.int64(ld64(wba + 8 * k))
            m = ld64(wma + 8 * k)
            b = pk >> 3
            s = pk & 7
            x0 = _low_bits(r0, b, s, nb, m)
            x1 = _low_bits(r1, b, s, nb, m)
            x2 = _low_bits(r2, b, s, nb, m)
            x3 = _low_bits(r3, b, s, nb, m)
            pk += nb
        ci = cia + 24 * j
        lut = np.int64(ld64(ci))
        dct = np.int64(ld64(ci + 8))
        sh = ld64(ci + 16)
        f0 = np.int64(ld16(lut + 2 * np.int64(w0 & np.uint64(0xFF))))
        f1 = np.int64(ld16(lut + 2 * np.int64(w1 & np.uint64(0xFF))))
        f2 = np.int64(ld16(lut + 2 * np.int64(w2 & np.uint64(0xFF))))
        f3 = np.int64(ld16(lut + 2 * np.int64(w3 & np.uint64(0xFF))))
        h0 = ld64(dct + 8 * (f0 & 0xFF))  # the dictionary has a slot at ESC too
        h1 = ld64(dct + 8 * (f1 & 0xFF))
        h2 = ld64(dct + 8 * (f2 & 0xFF))
        h3 = ld64(dct + 8 * (f3 & 0xFF))
        # one test for the four rows: is any code an escape (or none: BAD_ENTRY's low byte is ESC)?
        if ((f0 & 0xFF) == ESC) | ((f1 & 0xFF) == ESC) | ((f2 & 0xFF) == ESC) | \
                ((f3 & 0xFF) == ESC):
            h0, e0 = _escape(r0, f0, h0, e0, s0, HE)
            h1, e1 = _escape(r1, f1, h1, e1, s1, HE)
            h2, e2 = _escape(r2, f2, h2, e2, s2, HE)
            h3, e3 = _escape(r3, f3, h3, e3, s3, HE)
        w0 >>= np.uint64((f0 >> 8) & 63)  # BAD_ENTRY's 255: a corrupt row's garbage
        w1 >>= np.uint64((f1 >> 8) & 63)
        w2 >>= np.uint64((f2 >> 8) & 63)
        w3 >>= np.uint64((f3 >> 8) & 63)
        x0 |= h0 << sh
        x1 |= h1 << sh
        x2 |= h2 << sh
        x3 |= h3 << sh
        if (j & emask) == emask or j == d - 1:  # the word is complete
            if k < nfull:
                st64(o0 + 8 * k, x0)
                st64(o1 + 8 * k, x1)
                st64(o2 + 8 * k, x2)
                st64(o3 + 8 * k, x3)
            else:
                for q in range(ntail):
                    st8(o0 + 8 * k + q, x0 >> np.uint64(8 * q))
                    st8(o1 + 8 * k + q, x1 >> np.uint64(8 * q))
                    st8(o2 + 8 * k + q, x2 >> np.uint64(8 * q))
                    st8(o3 + 8 * k + q, x3 >> np.uint64(8 * q))
            k += 1
    c0 += np.int64(clz64(w0)) - _CLZ_UNUSED
    c1 += np.int64(clz64(w1)) - _CLZ_UNUSED
    c2 += np.int64(clz64(w2)) - _CLZ_UNUSED
    c3 += np.int64(clz64(w3)) - _CLZ_UNUSED
    return (c0 if e0 == s0 else -1, c1 if e1 == s1 else -1, c2 if e2 == s2 else -1,
            c3 if e3 == s3 else -1)


@njit(inline="always")
def _column_info(colp, dlut, t_dict):
    """(d, 3) int64: per column the address of its dense decode table, of its dictionary,
    and the shift of its high part in its 64-bit word (what _dense_quad reads per column)."""
    d = colp.shape[0]
    info = np.empty((d, 3), dtype=np.int64)
    da = np.int64(dlut.ctypes.data)
    tda = np.int64(t_dict.ctypes.data)
    for j in range(d):
        t = colp[j, C_TID]
        info[j, 0] = da + 2 * LUT_SIZE * t
        info[j, 1] = tda + 8 * LUT_SIZE * t
        info[j, 2] = colp[j, C_HSHIFT]
    return info


@njit(inline="always")
def _decode_row(i, dst_row, payload, offsets, words, rows, row_nbytes, sparse, HE, LS, IB, low_total, colp,
                colm, dlut, t_dict, bad, row, oa, nfull, ntail, epc, HS, wma, wba, cia):
    """Decode row i (at address row) alone (raw, dense or sparse) into row dst_row; bad[i] = 1 if it is
    corrupt."""
    d = words.shape[1]
    L = offsets[i + 1] - offsets[i]
    if L == row_nbytes:
        copy_bytes(oa + dst_row * row_nbytes, row, row_nbytes)
        return
    p = 0
    mode = 0
    if sparse:
        mode = int(get_bits(row, 0, 1))
        p = 1
    ok = True
    if mode == 0:
        o = oa + dst_row * row_nbytes
        end = _dense_quad(row, o, row, o, row, o, row, o, p, d, low_total, HE, nfull, ntail, epc,
                          wma, wba, cia)[0]
        if end < 0 or (end + 7) >> 3 != L:
            bad[i] = 1
        return
    v, p = get_gamma(row, p)
    nnz = v - 1
    if v == 0 or nnz > d:
        bad[i] = 1
        return
    v, p = get_gamma(row, p)
    ne = v - 1
    if v == 0 or ne > nnz:
        bad[i] = 1
        return
    for j in range(d):
        words[dst_row, j] = colm[j, M_DEFAULT]
    ppos = p
    plow = ppos + nnz * IB
    pesc = plow + nnz * LS
    pc = pesc + ne * HS
    used = 0
    prev = -1
    for k in range(nnz):
        j = int(get_bits(row, ppos + k * IB, IB))
        if j <= prev or j >= d:
            ok = False
            break
        prev = j
        t = colp[j, C_TIDS]
        e = int(dlut[t, int(get_bits(row, pc, LUT_BITS))])
        if e == BAD_ENTRY:
            ok = False
            break
        pc += e >> 8
        idx = e & 0xFF
        if idx == ESC:
            if used >= ne:
                ok = False
                break
            hi = get_bits(row, pesc + used * HS, HS)
            used += 1
        else:
            hi = t_dict[t, idx]
        lo = get_bits(row, plow + k * LS, LS)
        if LS < 64:
            lo |= hi << np.uint64(LS)
        words[dst_row, j] = lo
    if not ok or used != ne or (pc + 7) >> 3 != L:
        bad[i] = 1


def _decode_impl(payload, offsets, dest, words, rows, row_nbytes, W, sparse, HE, LS, IB, low_total,
                 colp, colm, wmask, wbits, dlut, t_dict, bad):
    """Decode every row into rows (n, row_nbytes) (words: its element view), row i into row dest[i] (row i
    when dest is empty); bad[i] = 1 if row i is corrupt.

    Rows go in blocks of DEC_BLOCK: the block's dense rows four at a time in lockstep
    (_dense_quad), then raw and sparse rows one by one, with the rows of any group that
    held a corrupt row (decoded again alone, so only that row is reported).

    Nothing outside the payload is read, whatever it holds. Decoding a row reads at most
    row_reach bytes from its start, however corrupt: the rows starting within that many bytes
    of the payload's end are read from a zero-padded copy of it (layout.rows.padded_end), where
    a corrupt row is reported as well (a stream that runs past its row's end ends there,
    whatever it reads).
    """
    n = offsets.shape[0] - 1
    d = words.shape[1]
    nodest = dest.shape[0] == 0
    base = np.int64(payload.ctypes.data)
    oa = np.int64(rows.ctypes.data)
    nfull = row_nbytes >> 3
    ntail = row_nbytes & 7
    epc = 64 // W
    HS = W - LS
    wma = np.int64(wmask.ctypes.data)
    wba = np.int64(wbits.ctypes.data)
    info = _column_info(colp, dlut, t_dict)
    p = 1 if sparse else 0
    far, tail, near_end = padded_end(payload, row_reach(W, sparse, d, low_total, HE, IB))
    for blk in prange((n + DEC_BLOCK - 1) // DEC_BLOCK):
        cia = np.int64(info.ctypes.data)  # taken here: info must stay alive while it is read
        near = np.int64(near_end.ctypes.data)  # the same
        a = blk * DEC_BLOCK
        b = min(n, a + DEC_BLOCK)
        dense = np.empty(DEC_BLOCK, dtype=np.int64)
        alone = np.empty(DEC_BLOCK, dtype=np.int64)  # raw, sparse, and groups with a bad row
        nd = 0
        na = 0
        for i in range(a, b):
            if offsets[i + 1] - offsets[i] != row_nbytes and (
                    not sparse or get_bits(base + offsets[i], 0, 1) == _ZERO):
                dense[nd] = i
                nd += 1
            else:
                alone[na] = i
                na += 1
        for q in range(0, nd, 4):
            if q + 4 * PREFETCH_QUADS < nd:  # the output rows of a quad ahead
                for r in dense[q + 4 * PREFETCH_QUADS:min(nd, q + 4 * PREFETCH_QUADS + 4)]:
                    ahead = oa + (r if nodest else dest[r]) * row_nbytes
                    for z in range(0, row_nbytes, 64):
                        prefetch_write(ahead + z)
            i0 = dense[q]
            i1 = dense[min(q + 1, nd - 1)]  # fewer than four left: the last one repeats
            i2 = dense[min(q + 2, nd - 1)]
            i3 = dense[min(q + 3, nd - 1)]
            o0, o1, o2, o3 = (i0, i1, i2, i3) if nodest else (dest[i0], dest[i1], dest[i2], dest[i3])
            ends = _dense_quad(row_address(offsets[i0], base, far, near, tail), oa + o0 * row_nbytes,
                               row_address(offsets[i1], base, far, near, tail), oa + o1 * row_nbytes,
                               row_address(offsets[i2], base, far, near, tail), oa + o2 * row_nbytes,
                               row_address(offsets[i3], base, far, near, tail), oa + o3 * row_nbytes,
                               p, d, low_total, HE, nfull, ntail, epc, wma, wba, cia)
            ok = True
            for r, end in ((i0, ends[0]), (i1, ends[1]), (i2, ends[2]), (i3, ends[3])):
                if end < 0 or (end + 7) >> 3 != offsets[r + 1] - offsets[r]:
                    ok = False
            if not ok:
                for r in dense[q:min(q + 4, nd)]:
                    alone[na] = r
                    na += 1
        for k in range(na):
            i = alone[k]
            row = row_address(offsets[i], base, far, near, tail)
            _decode_row(i, i if nodest else dest[i], payload, offsets, words, rows, row_nbytes, sparse, HE, LS, IB,
                        low_total, colp, colm, dlut, t_dict, bad, row, oa, nfull, ntail, epc,
                        HS, wma, wba, cia)


_decode = build_kernels(_decode_impl)

DECODE_TABLE_ARGS = ("row_nbytes", "W", "sparse", "HE", "LS", "IB", "low_total", "colp", "colm",
                     "wmask", "wbits", "dlut", "t_dict")
"""The EBPTables fields _decode_impl takes, in its parameter order (a test checks both sides)."""


def decode_rows(payload: np.ndarray, offsets: np.ndarray, words: np.ndarray, rows: np.ndarray,
                t: EBPTables, dest: np.ndarray = NO_DEST) -> np.ndarray:
    """Decode into words (rows: its byte view), row i into row dest[i] (row i when `dest` is empty; offsets
    and dest checked by the caller); return the indices of corrupt rows."""
    n = offsets.shape[0] - 1
    bad = np.zeros(n, dtype=np.uint8)
    pick_kernel(_decode, n)(payload, offsets, dest, words, rows,
                            *(getattr(t, name) for name in DECODE_TABLE_ARGS), bad)
    return np.flatnonzero(bad)
