"""IBPTables: the decode tables of an IBP codec (one frozen record), and the kernels' view of them.

The CPU kernels read one UNIT_RECORD per 64-bit unit of a row (one word when W = 64, two
adjacent words when W = 32, the second's bits in the high half); the byte offsets the
numba code uses (_MASK, _BITVAL, _FREE_MASK, UNIT_BYTES) are derived from that dtype.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ...layout.bitstream import get_bits, ld64, pdep, pext, popcnt

#: one entry of IBPTables.cols: a 64-bit unit's invariant mask, usual bits, free-bit mask, padding.
UNIT_RECORD = np.dtype([("mask", "<u8"), ("bitval", "<u8"), ("free_mask", "<u8"), ("pad", "<u8")])
_MASK = UNIT_RECORD.fields["mask"][1]
_BITVAL = UNIT_RECORD.fields["bitval"][1]
_FREE_MASK = UNIT_RECORD.fields["free_mask"][1]
UNIT_BYTES = UNIT_RECORD.itemsize

_ONE = np.uint64(1)
_ZERO = np.uint64(0)
LOW32 = np.uint64(0xFFFFFFFF)
WORD_DTYPE = {32: np.uint32, 64: np.uint64}


@dataclass(frozen=True, eq=False)
class IBPTables:
    """What encoding and decoding an IBP row needs, derived from (W, mask, bitval); never
    modified after build (the arrays stay writable: numba compiles read-only arrays apart,
    and measurably slower).

    Fields: W (word bits, 32 or 64), n_words (words per row), row_nbytes, mask and bitval
    (uint64 per word column: the invariant bits and their usual values), free_mask and
    free_bits (uint64 mask and int64 count of the bits stored for a participating word),
    header_bits (participation bits of a row, rounded up to W), cols (the kernels' units:
    (n_units, 4) uint64, a view of UNIT_RECORD entries).
    """

    W: int
    n_words: int
    row_nbytes: int
    mask: np.ndarray
    bitval: np.ndarray
    free_mask: np.ndarray
    free_bits: np.ndarray
    header_bits: int
    cols: np.ndarray

    @classmethod
    def build(cls, W: int, row_nbytes: int, mask: np.ndarray, bitval: np.ndarray) -> "IBPTables":
        """The tables of a codec with W-bit words, rows of row_nbytes bytes, and (mask, bitval)."""
        W = int(W)
        n_words = int(mask.shape[0])
        mask = np.ascontiguousarray(mask, dtype=np.uint64)
        bitval = np.ascontiguousarray(bitval, dtype=np.uint64)
        free_mask = ~mask & np.uint64(2**W - 1)
        free_bits = np.array([bin(int(m)).count("1") for m in free_mask], dtype=np.int64)
        per = 64 // W  # words per 64-bit unit
        n_units = -(-n_words // per)
        words = np.zeros(n_units * per, dtype=UNIT_RECORD)
        words["mask"][:n_words] = mask
        words["bitval"][:n_words] = bitval
        words["free_mask"][:n_words] = free_mask
        if per == 2:  # word 2k in the low half, 2k + 1 in the high half
            units = np.zeros(n_units, dtype=UNIT_RECORD)
            for f in UNIT_RECORD.names:
                units[f] = words[f][0::2] | (words[f][1::2] << np.uint64(32))
        else:
            units = words
        cols = units.view(np.uint64).reshape(n_units, len(UNIT_RECORD.names))
        return cls(W=W, n_words=n_words, row_nbytes=int(row_nbytes), mask=mask, bitval=bitval,
                   free_mask=free_mask, free_bits=free_bits, header_bits=-(-n_words // W) * W,
                   cols=np.ascontiguousarray(cols))


def word_view(rows: np.ndarray, W: int) -> np.ndarray:
    """(rows, n_words) W-bit words of a (rows, row_nbytes) uint8 array.

    A view when row_nbytes is a whole number of words; otherwise a zero-padded copy
    (the format pads the last word with zeros).
    """
    wb = W // 8
    n, nb = rows.shape
    if nb % wb == 0:
        return rows.view(WORD_DTYPE[W])
    words = np.zeros((n, -(-nb // wb)), dtype=WORD_DTYPE[W])
    words.view(np.uint8)[:, :nb] = rows
    return words


# The effective free mask of a unit: free_mask for its participating words, all ones for
# its exceptions. Then one pext stores a whole unit (a participating word's free bits, an
# exception's W bits, in word order), popcount(eff) is its stored width, and one pdep plus
# the participating words' bitval decodes it. No branch depends on the data.

@njit(inline="always")
def not_part32(p0, p1):
    """~pm of two 32-bit words: all ones over an exception's half, zeros over a participant's."""
    return ((p0 - _ONE) & LOW32) | ((p1 - _ONE) << np.uint64(32))


@njit(inline="always")
def unit_parts(x, c):
    """d = (x & mask) ^ bitval of the unit at table address c: zero where words participate."""
    return (x & ld64(c + _MASK)) ^ ld64(c + _BITVAL)


@njit(inline="always")
def pack_unit(x, c, npm):
    """(stored bits, their count) of unit x with ~pm = npm."""
    eff = ld64(c + _FREE_MASK) | npm
    return pext(x, eff), np.int64(popcnt(eff))


@njit(inline="always")
def unpack_unit(row, p, c, npm):
    """(unit, stored bits consumed) read at bit p of the row, for ~pm = npm."""
    eff = ld64(c + _FREE_MASK) | npm
    nb = np.int64(popcnt(eff))
    return pdep(get_bits(row, p, nb), eff) | (ld64(c + _BITVAL) & ~npm), nb
