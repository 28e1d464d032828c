"""CPU decoder of the IBP row format (docs/format.md), compiled with numba."""
from __future__ import annotations

import numpy as np
from numba import prange

from ...layout.bitstream import build_kernels, copy_bytes, get_bits, pick_kernel, st32, st64
from ...layout.rows import NO_DEST, padded_end, row_address
from .tables import UNIT_BYTES, LOW32, WORD_DTYPE, IBPTables, not_part32, unpack_unit

_ONE = np.uint64(1)


def _decode_impl(payload, offsets, dest, words, rows, row_nbytes, cols, header_bits, bad):
    """Decode every row of payload into words (rows, n_words), row i into row dest[i] (row i when dest is
    empty); rows is its byte view. bad[i] = 1 when row i is corrupt: a compressed row whose bit stream does
    not end in its last byte (docs/format.md; its header asks for more or fewer bits than it has).

    Nothing outside the payload is read, whatever it holds. A row's reads span at most its header, every
    word stored whole and get_bits' 16 bytes from its start, however corrupt: the rows starting that close
    to the payload's end are read from a zero-padded copy of it (layout.rows.padded_end), where a corrupt
    row is reported as well (its stream's end comes from its header alone)."""
    W = words.itemsize * 8
    n = offsets.shape[0] - 1
    n_words = words.shape[1]
    base = np.int64(payload.ctypes.data)
    dst = np.int64(words.ctypes.data)
    col = np.int64(cols.ctypes.data)
    far, tail, near_end = padded_end(payload, ((header_bits + n_words * W) >> 3) + 16)
    for i in prange(n):
        o = np.int64(i) if dest.shape[0] == 0 else dest[i]
        start = offsets[i]
        L = offsets[i + 1] - start
        # near_end's address taken here: it must stay alive while it is read
        row = row_address(start, base, far, np.int64(near_end.ctypes.data), tail)
        if L == row_nbytes:
            copy_bytes(np.int64(rows.ctypes.data) + o * rows.strides[0], row, row_nbytes)
            continue
        wrow = dst + o * n_words * (W // 8)
        p = header_bits
        for c0 in range(0, n_words, 64):
            c1 = min(c0 + 64, n_words)
            hb = get_bits(row, c0, c1 - c0)
            j = c0
            if W == 32:
                while j + 1 < c1:  # a unit of two words: one read, one pdep, one 8-byte store
                    q = hb >> np.uint64(j - c0)
                    x, nb = unpack_unit(row, p, col + (j >> 1) * UNIT_BYTES,
                                        not_part32(q & _ONE, (q >> _ONE) & _ONE))
                    st64(wrow + 4 * j, x)
                    p += nb
                    j += 2
                if j < c1:
                    npm = (((hb >> np.uint64(j - c0)) & _ONE) - _ONE) & LOW32
                    x, nb = unpack_unit(row, p, col + (j >> 1) * UNIT_BYTES, npm)
                    st32(wrow + 4 * j, x)
                    p += nb
            else:
                while j < c1:
                    npm = ((hb >> np.uint64(j - c0)) & _ONE) - _ONE
                    x, nb = unpack_unit(row, p, col + j * UNIT_BYTES, npm)
                    st64(wrow + 8 * j, x)
                    p += nb
                    j += 1
        bad[i] = (p + 7) >> 3 != L  # a store, not a branch: measurably faster


_decode = build_kernels(_decode_impl)


def decode_rows(payload: np.ndarray, offsets: np.ndarray, out: np.ndarray,
                tables: IBPTables, dest: np.ndarray = NO_DEST) -> np.ndarray:
    """Decode into out, a (rows, row_nbytes) uint8 array, row i into out[dest[i]] (out[i] when `dest` is
    empty); offsets (rows.check_offsets_array) and dest checked by the caller. Returns the indices of
    corrupt rows (their content in out is undefined)."""
    t = tables
    n = offsets.shape[0] - 1
    wb = t.W // 8
    if out.shape[1] % wb == 0:
        words, rows = out.view(WORD_DTYPE[t.W]), out
    else:  # rows not whole words: decoded in order into whole words, then copied to their places
        words = np.empty((n, t.n_words), dtype=WORD_DTYPE[t.W])
        rows = words.view(np.uint8)
    bad = np.zeros(n, dtype=np.uint8)
    pick_kernel(_decode, n)(payload, offsets, dest if rows is out else NO_DEST, words, rows, t.row_nbytes,
                            t.cols, t.header_bits, bad)
    if rows is not out:
        out[dest if dest.shape[0] else slice(None)] = rows[:, : out.shape[1]]
    return np.flatnonzero(bad)
