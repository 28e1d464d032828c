"""CPU encoder of the EBP row format (docs/format.md, "EBP row format"), compiled with numba.

Every row is written dense or sparse (whichever takes fewer bits) into per-chunk scratch,
then compacted behind its predecessors; a row no shorter than raw is stored raw.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from ...threads import parallel_slot
from ...layout.bitstream import (build_kernels, copy_bytes, ld8, ld16, ld32, ld64, parallel_ok, pext,
                                 put_bits, st64)
from ...layout.rows import PAYLOAD_TAIL, offsets_from_lengths
from .codes import hash_high
from .stream import gamma_bits, lowmask, put_gamma
from .tables import (C_D, C_DDEF, C_DDEFE, C_DMIN, C_LW, C_S, F_DLIM, F_EOFF, F_ESCE, F_HMASK,
                     F_HOFF, M_DEFAULT, M_HIMASK, R_DLIM, R_EADDR, R_HIMASK, R_SHIFT, REC_BYTES,
                     EBPTables)
from ...jit_cache import install as _install_kernel_cache

_install_kernel_cache()  # numba caches this module's kernels per environment (ibp_graph.jit_cache)

_ONE = np.uint64(1)
_ZERO = np.uint64(0)


@njit(inline="always")
def _entry(hi, elut_addr, hp_base, fp):
    """Encode entry of high part hi: reversed code | length << 8 | escape << 12.

    fp is the address of a column's five table fields in colp (elut offset, direct-lookup
    limit, hash-table offset, hash mask, escape entry: C_D.. or C_S..). Below the limit one
    direct lookup; above it a probe of the table's open-addressing hash table. Scalars only:
    numba reference-counts array arguments on every call.
    """
    if hi < ld64(fp + 8 * F_DLIM):
        return np.int64(ld16(elut_addr + 2 * (np.int64(ld64(fp + 8 * F_EOFF)) + np.int64(hi))))
    return _hashed_entry(hi, hp_base, fp)


@njit(inline="never", cache=True, nogil=True)
def _hashed_entry(hi, hp_base, fp):
    """_entry for a high part beyond the direct-lookup range: a hash-table probe."""
    # hpairs holds (value, entry | SLOT_USED) pairs of two uint64: 16 bytes a slot
    base = hp_base + 16 * np.int64(ld64(fp + 8 * F_HOFF))
    mask = np.int64(ld64(fp + 8 * F_HMASK))
    slot = hash_high(hi) & mask
    while True:
        e = np.int64(ld64(base + 16 * slot + 8))
        if e == 0:  # an empty slot: not in the dictionary
            return np.int64(ld64(fp + 8 * F_ESCE))
        if ld64(base + 16 * slot) == hi:
            return e & 0x7FFF
        slot = (slot + 1) & mask


@njit(inline="always")
def _load_chunk(raddr, k, nfull, ntail):
    """64-bit chunk k of a row at address raddr (the partial last chunk read byte by byte)."""
    if k < nfull:
        return ld64(raddr + 8 * k)
    w = _ZERO
    for b in range(ntail):
        w |= np.uint64(ld8(raddr + 8 * k + b)) << np.uint64(8 * b)
    return w


@njit(inline="always")
def _ld_elem(addr, wb):
    """Element of wb bytes (1, 2, 4 or 8; a compile-time constant) at addr, as uint64."""
    if wb == 8:
        return ld64(addr)
    if wb == 4:
        return ld32(addr)
    if wb == 2:
        return ld16(addr)
    return ld8(addr)


@njit(inline="always")
def _dense_entry(h, rp, sva, fp):
    """Encode entry of high part h of the column whose drec record is at rp (fp: its colp
    table fields, for the hash probe beyond the direct range)."""
    if h < ld64(rp + R_DLIM):
        return np.int64(ld16(np.int64(ld64(rp + R_EADDR)) + 2 * np.int64(h)))
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
                h = _ld_elem(wp, wb) >> ld64(rp + R_SHIFT)
                if wb == 8:  # a shift of 64 (no high part) is stored as 0: mask it off
                    h &= ld64(rp + R_HIMASK)
                if direct:  # every column's high parts lie in its direct table
                    e = np.int64(ld16(np.int64(ld64(rp + R_EADDR)) + 2 * np.int64(h)))
                else:
                    e = _dense_entry(h, rp, sva, cpa + j * cstride + 8 * C_D)
                st64(escp + 8 * ne, h)
                ne += e >> 12
                cv |= np.uint64(e & 0xFF) << np.uint64(ln)
                ln += (e >> 8) & 0xF
                wp += wb
                rp += REC_BYTES
                j += 1
            cop, cacc, cn = put_bits(cop, cacc, cn, cv, ln, clim)
        return cop, cacc, cn, ne

    return dense_codes


_dense_codes1, _dense_codes2, _dense_codes4, _dense_codes8 = (
    _make_dense_codes(1), _make_dense_codes(2), _make_dense_codes(4), _make_dense_codes(8))


def _encode_impl(words, rows, n_chunks, row_nbytes, W, sparse, HE, LS, IB, low_total, colp, colm,
                 drec, all_direct, wmask, wbits, elut, hpairs, tmp, lengths, scratch):
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
    lomask_s = lowmask(LS)
    himask_s = lowmask(HS)
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
                sp_bits += nnz * (IB + LS) + gamma_bits(nnz + 1) + gamma_bits(ne_s + 1) + \
                    ne_s * HS
                lb_bits += gamma_bits(lb_esc + 1) + lb_esc * HE
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
                    dense_bits += gamma_bits(ne_d + 1) + ne_d * HE
                    use_sparse = sp_bits < dense_bits
            op = sbase
            acc = _ZERO
            nacc = 0
            cop = cbase
            cacc = _ZERO
            cn = 0
            if not use_sparse:
                if sparse:
                    op, acc, nacc = put_bits(op, acc, nacc, _ZERO, 1, slim)
                # low stream: the low bits of a 64-bit chunk of the row in one pext
                raddr = ra + i * row_nbytes
                for k in range(nck):
                    w = _load_chunk(raddr, k, nfull, ntail)
                    op, acc, nacc = put_bits(op, acc, nacc, pext(w, wmask[k]), wbits[k], slim)
                args = (wa + i * d * wb, d, rca, all_direct, cpa, cstride, sva,
                        np.int64(esc.ctypes.data), cop, cacc, cn, clim)
                if wb == 4:
                    cop, cacc, cn, ne = _dense_codes4(*args)
                elif wb == 2:
                    cop, cacc, cn, ne = _dense_codes2(*args)
                elif wb == 8:
                    cop, cacc, cn, ne = _dense_codes8(*args)
                else:
                    cop, cacc, cn, ne = _dense_codes1(*args)
                op, acc, nacc = put_gamma(op, acc, nacc, ne + 1, slim)
                for k in range(ne):
                    op, acc, nacc = put_bits(op, acc, nacc, esc[k], HE, slim)
            else:
                op, acc, nacc = put_bits(op, acc, nacc, _ONE, 1, slim)
                op, acc, nacc = put_gamma(op, acc, nacc, nnz + 1, slim)
                ne = 0
                for k in range(nnz):
                    ne += nz_e[k] >> 12
                op, acc, nacc = put_gamma(op, acc, nacc, ne + 1, slim)
                for k in range(nnz):
                    op, acc, nacc = put_bits(op, acc, nacc, np.uint64(nz_idx[k]), IB, slim)
                for k in range(nnz):
                    x = np.uint64(words[i, nz_idx[k]])
                    op, acc, nacc = put_bits(op, acc, nacc, x & lomask_s, LS, slim)
                for k in range(nnz):
                    if nz_e[k] >> 12:
                        op, acc, nacc = put_bits(op, acc, nacc, nz_hi[k], HS, slim)
                for k in range(nnz):
                    e = nz_e[k]
                    cop, cacc, cn = put_bits(cop, cacc, cn, np.uint64(e & 0xFF), (e >> 8) & 0xF,
                                         clim)
            # append the code stream
            for q in range(cbase, cop, 8):
                op, acc, nacc = put_bits(op, acc, nacc, ld64(q), 64, slim)
            op, acc, nacc = put_bits(op, acc, nacc, cacc, cn, slim)
            st64(op, acc)
            L = ((op - sbase) * 8 + nacc + 7) >> 3
            src = sbase
            if L >= row_nbytes:
                src = ra + i * row_nbytes
                L = row_nbytes
            copy_bytes(ta + pos, src, L)
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
        copy_bytes(oa + offsets[a], ta + a * row_nbytes, offsets[b] - offsets[a])


_encode = build_kernels(_encode_impl)
_compact = build_kernels(_compact_impl)


# --------------------------------------------------------------------------- API
ENCODE_TABLE_ARGS = ("row_nbytes", "W", "sparse", "HE", "LS", "IB", "low_total", "colp", "colm",
                     "drec", "all_direct", "wmask", "wbits", "elut", "hpairs")
"""The EBPTables fields _encode_impl takes, in its parameter order (a test checks both sides)."""


def encode_rows(words: np.ndarray, rows: np.ndarray, t: EBPTables) -> tuple[np.ndarray, np.ndarray]:
    """(payload, offsets) of rows given as (n, d) element words and their (n, row_nbytes) bytes."""
    n = words.shape[0]
    rb = t.row_nbytes
    with parallel_slot(parallel_ok(n)) as par:  # one parallel kernel at a time in a process (ibp_graph.threads)
        n_chunks = max(1, min(n, 4 * numba.get_num_threads())) if par else 1
        # Room for every row raw (only the pages written are ever touched) plus the tail.
        tmp = np.empty(n * rb + PAYLOAD_TAIL + 8, dtype=np.uint8)
        lengths = np.zeros(n, dtype=np.int64)
        drec = t.drec.copy()  # entry offsets -> addresses, valid while t.elut lives (this call)
        drec[:, R_EADDR // 8] += np.uint64(t.elut.ctypes.data)
        table_args = {name: getattr(t, name) for name in ENCODE_TABLE_ARGS}
        table_args["drec"] = drec
        (_encode[0] if par else _encode[1])(
            words, rows, n_chunks, *(table_args[name] for name in ENCODE_TABLE_ARGS), tmp, lengths,
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


def row_lengths(words: np.ndarray, rows: np.ndarray, t: EBPTables) -> np.ndarray:
    """Stored bytes of every row (raw rows report row_nbytes)."""
    _, offsets = encode_rows(words, rows, t)
    return np.diff(offsets.astype(np.int64))
