"""CPU encoder of the IBP row format (docs/format.md), compiled with numba: bit counts for
fitting, row lengths, and the row writer."""
from __future__ import annotations

import numpy as np
from numba import prange

from ...layout.bitstream import build_kernels, ld32, ld64, pick_kernel, put_bits, st32, st64, copy_bytes
from ...layout.rows import offsets_from_lengths
from .tables import UNIT_BYTES, LOW32, IBPTables, not_part32, pack_unit, unit_parts, word_view

_U8 = np.uint64(8)
_FF = np.uint64(0xFF)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)


def _bit_counts_impl(words, W):
    """ones[j, b]: how many rows have bit b of word j set."""
    n, n_words = words.shape
    counts = np.zeros((n_words, W), dtype=np.int64)
    for j in prange(n_words):
        local = np.zeros(W, dtype=np.int64)
        for i in range(n):
            x = np.uint64(words[i, j])
            for b in range(W):
                local[b] += np.int64((x >> np.uint64(b)) & _ONE)
        counts[j, :] = local
    return counts


def _row_lengths_impl(words, W, row_nbytes, mask, bitval, free_bits, header_bits):
    """Stored bytes of each row under (mask, bitval), raw fallback included.

    Plain array indexing on purpose: LLVM vectorizes this loop (compare, select, add),
    which the pointer-and-popcount form of the kernels below would prevent (5x slower).
    """
    n, n_words = words.shape
    out = np.empty(n, dtype=np.int64)
    for i in prange(n):
        bits = header_bits
        for j in range(n_words):
            x = np.uint64(words[i, j])
            if (x & mask[j]) == bitval[j]:
                bits += free_bits[j]
            else:
                bits += W
        L = (bits + 7) >> 3
        out[i] = row_nbytes if L >= row_nbytes else L
    return out


def _encode_impl(words, rows, row_nbytes, cols, header_bits, offsets, out):
    """Write every row at out[offsets[i]:offsets[i+1]] (raw when that length is row_nbytes)."""
    W = words.itemsize * 8  # a compile-time constant per word dtype
    n, n_words = words.shape
    base = np.int64(out.ctypes.data)
    src = np.int64(words.ctypes.data)
    col = np.int64(cols.ctypes.data)
    header_bytes = header_bits >> 3
    for i in prange(n):
        L = offsets[i + 1] - offsets[i]
        if L == row_nbytes:
            copy_bytes(base + offsets[i], np.int64(rows.ctypes.data) + i * rows.strides[0], row_nbytes)
            continue
        row = base + offsets[i]
        limit = base + offsets[i + 1]
        wrow = src + i * n_words * (W // 8)
        # the body streams from byte header_bytes; each 64-word chunk's participation bits
        # are stored (one 8- or 4-byte store) when the chunk is done
        op = row + header_bytes
        acc = _ZERO
        nacc = 0
        for c0 in range(0, n_words, 64):
            c1 = min(c0 + 64, n_words)
            hb = _ZERO
            j = c0
            if W == 32:
                while j + 1 < c1:  # a unit of two words: one load, one pext, one append
                    x = ld64(wrow + 4 * j)
                    c = col + (j >> 1) * UNIT_BYTES
                    d = unit_parts(x, c)
                    p0 = np.uint64((d & LOW32) == _ZERO)
                    p1 = np.uint64((d >> np.uint64(32)) == _ZERO)
                    hb |= (p0 | (p1 << _ONE)) << np.uint64(j - c0)
                    v, nb = pack_unit(x, c, not_part32(p0, p1))
                    op, acc, nacc = put_bits(op, acc, nacc, v, nb, limit)
                    j += 2
                if j < c1:  # the last word of an odd row: the low half of its unit
                    x = ld32(wrow + 4 * j)  # the unit's high half is zero, in x and the table
                    c = col + (j >> 1) * UNIT_BYTES
                    p0 = np.uint64(unit_parts(x, c) == _ZERO)
                    hb |= p0 << np.uint64(j - c0)
                    v, nb = pack_unit(x, c, (p0 - _ONE) & LOW32)
                    op, acc, nacc = put_bits(op, acc, nacc, v, nb, limit)
            else:
                while j < c1:
                    x = ld64(wrow + 8 * j)
                    c = col + j * UNIT_BYTES
                    p0 = np.uint64(unit_parts(x, c) == _ZERO)
                    hb |= p0 << np.uint64(j - c0)
                    v, nb = pack_unit(x, c, p0 - _ONE)
                    op, acc, nacc = put_bits(op, acc, nacc, v, nb, limit)
                    j += 1
            if header_bytes - (c0 >> 3) >= 8:
                st64(row + (c0 >> 3), hb)
            else:
                st32(row + (c0 >> 3), hb)
        k = op - base
        while nacc > 0:
            out[k] = np.uint8(acc & _FF)
            acc >>= _U8
            nacc -= 8
            k += 1


_bit_counts = build_kernels(_bit_counts_impl)
_row_lengths = build_kernels(_row_lengths_impl)
_encode = build_kernels(_encode_impl)


def bit_counts(rows: np.ndarray, W: int) -> np.ndarray:
    """(n_words, W) int64 counts of set bits over the rows of a (rows, row_nbytes) uint8 array."""
    words = word_view(rows, W)
    return pick_kernel(_bit_counts, words.size // 8)(words, W)


def row_lengths(rows: np.ndarray, tables: IBPTables) -> np.ndarray:
    """Stored bytes of every row under the codec tables (raw rows report row_nbytes)."""
    return _word_lengths(word_view(rows, tables.W), tables)


def _word_lengths(words: np.ndarray, t: IBPTables) -> np.ndarray:
    return pick_kernel(_row_lengths, words.shape[0])(words, t.W, t.row_nbytes, t.mask, t.bitval,
                                                     t.free_bits, t.header_bits)


def encode_rows(rows: np.ndarray, tables: IBPTables) -> tuple[np.ndarray, np.ndarray]:
    """(payload, offsets) of a (rows, row_nbytes) uint8 array in the IBP row format."""
    t = tables
    words = word_view(rows, t.W)
    lengths = _word_lengths(words, t)  # the words view is built once (a copy for odd widths)
    offsets, padded = offsets_from_lengths(lengths)
    out = np.empty(padded, dtype=np.uint8)  # the kernel writes every byte of every row
    out[int(offsets[-1]):] = 0
    pick_kernel(_encode, rows.shape[0])(np.ascontiguousarray(words), rows, t.row_nbytes, t.cols,
                                        t.header_bits, offsets, out)
    return out, offsets
