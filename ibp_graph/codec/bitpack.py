"""CPU bit-packing kernels of the IBP row format (docs/format.md), compiled with numba.

Each kernel exists twice: a parallel build for the main process and a serial build for
DataLoader workers (one core each, no threading layer, no locks). ``parallel_ok()``
decides which one a call uses.
"""
from __future__ import annotations

import sys

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from numba import njit, prange
from numba.core import cgutils, types
from numba.extending import intrinsic

from ..threads import use_parallel
from .base import PAYLOAD_TAIL

_U8 = np.uint64(8)
_FF = np.uint64(0xFF)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)

#: below this many rows a call runs the serial build (thread start-up would dominate).
PARALLEL_MIN_ROWS = 2048


def parallel_ok(n_rows: int) -> bool:
    """Whether to use the parallel kernels (see ibp_graph.threads)."""
    return use_parallel(n_rows, PARALLEL_MIN_ROWS)


if sys.byteorder != "little":  # pragma: no cover - the format is little-endian
    raise ImportError("ibp_graph.codec.bitpack needs a little-endian machine")


# --------------------------------------------------------------------------- helpers
def _load(bits: int):
    """Intrinsic: unaligned little-endian `bits`-bit load from an integer address, as uint64."""
    @intrinsic
    def load(typingctx, addr):
        def codegen(context, builder, signature, args):
            ptr = builder.inttoptr(args[0], ir.IntType(bits).as_pointer())
            v = builder.load(ptr, align=1)
            return v if bits == 64 else builder.zext(v, ir.IntType(64))

        return types.uint64(addr), codegen

    load.__doc__ = f"{bits}-bit load from an integer address, zero-extended (no bounds check)"
    return load


def _store(bits: int):
    """Intrinsic: unaligned little-endian store of the low `bits` bits of an integer value."""
    @intrinsic
    def store(typingctx, addr, val):
        def codegen(context, builder, signature, args):
            ptr = builder.inttoptr(args[0], ir.IntType(bits).as_pointer())
            v = args[1]
            if v.type.width > bits:
                v = builder.trunc(v, ir.IntType(bits))
            elif v.type.width < bits:
                v = builder.zext(v, ir.IntType(bits))
            builder.store(v, ptr, align=1)
            return context.get_dummy_value()

        return types.void(addr, val), codegen

    store.__doc__ = f"{bits}-bit store to an integer address (no bounds check)"
    return store


_ld8, _ld16, _ld32, _ld64 = _load(8), _load(16), _load(32), _load(64)
_st8, _st32, _st64 = _store(8), _store(32), _store(64)


def _bmi2_intrinsic(name: str, doc: str):
    @intrinsic
    def op(typingctx, x, m):
        sig = types.uint64(types.uint64, types.uint64)

        def codegen(context, builder, signature, args):
            fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64), ir.IntType(64)])
            fn = cgutils.get_or_insert_function(builder.module, fnty, name)
            return builder.call(fn, args)

        return sig, codegen

    op.__doc__ = doc
    return op


@njit(inline="always")
def _pdep_sw(c, m):
    """Deposit the low bits of c at the set bits of m, ascending (portable loop)."""
    x = _ZERO
    while m != _ZERO:
        low = m & (~m + _ONE)
        if c & _ONE:
            x |= low
        c >>= _ONE
        m ^= low
    return x


@njit(inline="always")
def _pext_sw(x, m):
    """Gather the bits of x at the set bits of m into the low bits, ascending (portable loop)."""
    c = _ZERO
    k = 0
    while m != _ZERO:
        low = m & (~m + _ONE)
        if x & low:
            c |= _ONE << np.uint64(k)
        k += 1
        m ^= low
    return c


#: x86 BMI2 has pdep/pext as single instructions; elsewhere a bit loop stands in.
HAVE_BMI2 = bool(llvm.get_host_cpu_features().get("bmi2", False))
if HAVE_BMI2:
    _pdep = _bmi2_intrinsic("llvm.x86.bmi.pdep.64", "pdep(c, m) in one instruction")
    _pext = _bmi2_intrinsic("llvm.x86.bmi.pext.64", "pext(x, m) in one instruction")
else:  # pragma: no cover - every x86-64 since 2013 has BMI2
    _pdep, _pext = _pdep_sw, _pext_sw


@njit(inline="always")
def _put(op, acc, nacc, v, n, limit):
    """Append the n low bits of v (0 <= n <= 64, v < 2**n) to the stream at address op.

    Branch-free: the 64-bit accumulator is stored at op on every call (when 8 bytes fit
    below `limit`, the row's end, so a row never touches its neighbour's bytes) and op
    advances by 8 once the accumulator is full; the bits of v that did not fit carry over.
    """
    acc |= v << np.uint64(nacc)
    if op + 8 <= limit:
        _st64(op, acc)
    total = nacc + n
    full = total >> 6
    spill = (v >> _ONE) >> np.uint64(63 - nacc)  # v >> (64 - nacc), 0 when nacc == 0
    acc = spill if full else acc  # a full accumulator's 8 bytes lie inside the row: stored above
    op += full << 3
    return op, acc, total & 63


@njit(inline="always")
def _get(row, p, n):
    """n bits (0..64) at bit p of the stream starting at address row (reads 16 bytes).

    Branch-free: the second word is always read (the payload's tail padding keeps it in
    bounds) and shifted in by 64 - s in two steps, which gives 0 when s == 0.
    """
    b = row + (p >> 3)
    s = np.uint64(p & 7)
    w = (_ld64(b) >> s) | ((_ld64(b + 8) << _ONE) << (np.uint64(63) - s))
    return w & (((_ONE << np.uint64(n & 63)) - _ONE) | (_ZERO - np.uint64(n >> 6)))


@njit(inline="always")
def _copy(dst, src, n):
    """Copy n bytes between integer addresses: whole 8-byte words while at least 8 bytes
    remain, then single bytes, so nothing past dst + n is written (rows copied in parallel
    never overlap)."""
    q = 0
    while q + 8 <= n:
        _st64(dst + q, _ld64(src + q))
        q += 8
    while q < n:
        _st8(dst + q, _ld8(src + q))
        q += 1


# --------------------------------------------------------------------------- kernels
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


#: BitTables.cols holds one 32-byte entry per 64-bit unit of a row (one word when W = 64,
#: two adjacent words when W = 32, the second's bits in the high half): mask, bitval,
#: free mask, and a pad to keep entries aligned.
_MASK, _BITVAL, _FREE_MASK = 0, 8, 16
_COL_BYTES = 32

_LOW32 = np.uint64(0xFFFFFFFF)


@intrinsic
def _popcnt(typingctx, x):
    """Set bits of a uint64 (one popcnt instruction where the CPU has it)."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.ctpop.i64")
        return builder.call(fn, args)

    return sig, codegen


# The effective free mask of a unit: free_mask for its participating words, all ones for
# its exceptions. Then one pext stores a whole unit (a participating word's free bits, an
# exception's W bits, in word order), popcount(eff) is its stored width, and one pdep plus
# the participating words' bitval decodes it. No branch depends on the data.

@njit(inline="always")
def _not_part32(p0, p1):
    """~pm of two 32-bit words: all ones over an exception's half, zeros over a participant's."""
    return ((p0 - _ONE) & _LOW32) | ((p1 - _ONE) << np.uint64(32))


@njit(inline="always")
def _parts(x, c):
    """d = (x & mask) ^ bitval of the unit at table address c: zero where words participate."""
    return (x & _ld64(c + _MASK)) ^ _ld64(c + _BITVAL)


@njit(inline="always")
def _pack_unit(x, c, npm):
    """(stored bits, their count) of unit x with ~pm = npm."""
    eff = _ld64(c + _FREE_MASK) | npm
    return _pext(x, eff), np.int64(_popcnt(eff))


@njit(inline="always")
def _unpack_unit(row, p, c, npm):
    """(unit, stored bits consumed) read at bit p of the row, for ~pm = npm."""
    eff = _ld64(c + _FREE_MASK) | npm
    nb = np.int64(_popcnt(eff))
    return _pdep(_get(row, p, nb), eff) | (_ld64(c + _BITVAL) & ~npm), nb


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
            _copy(base + offsets[i], np.int64(rows.ctypes.data) + i * rows.strides[0], row_nbytes)
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
                    x = _ld64(wrow + 4 * j)
                    c = col + (j >> 1) * _COL_BYTES
                    d = _parts(x, c)
                    p0 = np.uint64((d & _LOW32) == _ZERO)
                    p1 = np.uint64((d >> np.uint64(32)) == _ZERO)
                    hb |= (p0 | (p1 << _ONE)) << np.uint64(j - c0)
                    v, nb = _pack_unit(x, c, _not_part32(p0, p1))
                    op, acc, nacc = _put(op, acc, nacc, v, nb, limit)
                    j += 2
                if j < c1:  # the last word of an odd row: the low half of its unit
                    x = _ld32(wrow + 4 * j)  # the unit's high half is zero, in x and the table
                    c = col + (j >> 1) * _COL_BYTES
                    p0 = np.uint64(_parts(x, c) == _ZERO)
                    hb |= p0 << np.uint64(j - c0)
                    v, nb = _pack_unit(x, c, (p0 - _ONE) & _LOW32)
                    op, acc, nacc = _put(op, acc, nacc, v, nb, limit)
            else:
                while j < c1:
                    x = _ld64(wrow + 8 * j)
                    c = col + j * _COL_BYTES
                    p0 = np.uint64(_parts(x, c) == _ZERO)
                    hb |= p0 << np.uint64(j - c0)
                    v, nb = _pack_unit(x, c, p0 - _ONE)
                    op, acc, nacc = _put(op, acc, nacc, v, nb, limit)
                    j += 1
            if header_bytes - (c0 >> 3) >= 8:
                _st64(row + (c0 >> 3), hb)
            else:
                _st32(row + (c0 >> 3), hb)
        k = op - base
        while nacc > 0:
            out[k] = np.uint8(acc & _FF)
            acc >>= _U8
            nacc -= 8
            k += 1


def _decode_impl(payload, offsets, words, rows, row_nbytes, cols, header_bits):
    """Decode every row of payload into words (rows, n_words); rows is its byte view."""
    W = words.itemsize * 8
    n, n_words = words.shape
    base = np.int64(payload.ctypes.data)
    dst = np.int64(words.ctypes.data)
    col = np.int64(cols.ctypes.data)
    for i in prange(n):
        start = offsets[i]
        L = offsets[i + 1] - start
        row = base + start
        if L == row_nbytes:
            _copy(np.int64(rows.ctypes.data) + i * rows.strides[0], row, row_nbytes)
            continue
        wrow = dst + i * n_words * (W // 8)
        p = header_bits
        for c0 in range(0, n_words, 64):
            c1 = min(c0 + 64, n_words)
            hb = _get(row, c0, c1 - c0)
            j = c0
            if W == 32:
                while j + 1 < c1:  # a unit of two words: one read, one pdep, one 8-byte store
                    q = hb >> np.uint64(j - c0)
                    x, nb = _unpack_unit(row, p, col + (j >> 1) * _COL_BYTES,
                                         _not_part32(q & _ONE, (q >> _ONE) & _ONE))
                    _st64(wrow + 4 * j, x)
                    p += nb
                    j += 2
                if j < c1:
                    npm = (((hb >> np.uint64(j - c0)) & _ONE) - _ONE) & _LOW32
                    x, nb = _unpack_unit(row, p, col + (j >> 1) * _COL_BYTES, npm)
                    _st32(wrow + 4 * j, x)
                    p += nb
            else:
                while j < c1:
                    npm = ((hb >> np.uint64(j - c0)) & _ONE) - _ONE
                    x, nb = _unpack_unit(row, p, col + j * _COL_BYTES, npm)
                    _st64(wrow + 8 * j, x)
                    p += nb
                    j += 1


def _gather_impl(payload, offsets, idx, new_offsets, out):
    """Copy rows idx[k] of (payload, offsets) to out at new_offsets[k]."""
    src0 = np.int64(payload.ctypes.data)
    dst0 = np.int64(out.ctypes.data)
    for k in prange(idx.shape[0]):
        s = offsets[idx[k]]
        _copy(dst0 + new_offsets[k], src0 + s, offsets[idx[k] + 1] - s)


def _build(fn):
    return (njit(parallel=True, cache=True, nogil=True)(fn), njit(cache=True, nogil=True)(fn))


_bit_counts = _build(_bit_counts_impl)
_row_lengths = _build(_row_lengths_impl)
_encode = _build(_encode_impl)
_decode = _build(_decode_impl)
_gather = _build(_gather_impl)


def _pick(kernels, n_rows):
    return kernels[0] if parallel_ok(n_rows) else kernels[1]


# --------------------------------------------------------------------------- API
_WORD_DTYPE = {32: np.uint32, 64: np.uint64}


def word_view(rows: np.ndarray, W: int) -> np.ndarray:
    """(rows, n_words) W-bit words of a (rows, row_nbytes) uint8 array.

    A view when row_nbytes is a whole number of words; otherwise a zero-padded copy
    (the format pads the last word with zeros).
    """
    wb = W // 8
    n, nb = rows.shape
    if nb % wb == 0:
        return rows.view(_WORD_DTYPE[W])
    words = np.zeros((n, -(-nb // wb)), dtype=_WORD_DTYPE[W])
    words.view(np.uint8)[:, :nb] = rows
    return words


def bit_counts(rows: np.ndarray, W: int) -> np.ndarray:
    """(n_words, W) int64 counts of set bits over the rows of a (rows, row_nbytes) uint8 array."""
    words = word_view(rows, W)
    return _pick(_bit_counts, words.size // 8)(words, W)


def row_lengths(rows: np.ndarray, tables: "BitTables") -> np.ndarray:
    """Stored bytes of every row under the codec tables (raw rows report row_nbytes)."""
    return _word_lengths(word_view(rows, tables.W), tables)


def _word_lengths(words: np.ndarray, t: "BitTables") -> np.ndarray:
    return _pick(_row_lengths, words.shape[0])(words, t.W, t.row_nbytes, t.mask, t.bitval,
                                               t.free_bits, t.header_bits)


def offsets_from_lengths(lengths: np.ndarray) -> tuple[np.ndarray, int]:
    """Row offsets (int32 below 2 GiB of rows, else int64) and the padded payload size."""
    total = int(lengths.sum()) if lengths.size else 0
    dtype = np.int32 if total < 2**31 else np.int64
    offsets = np.zeros(lengths.shape[0] + 1, dtype=dtype)
    np.cumsum(lengths, out=offsets[1:])
    padded = (total + PAYLOAD_TAIL + 7) // 8 * 8
    return offsets, padded


def encode_rows(rows: np.ndarray, tables: "BitTables") -> tuple[np.ndarray, np.ndarray]:
    """(payload, offsets) of a (rows, row_nbytes) uint8 array in the IBP row format."""
    t = tables
    words = word_view(rows, t.W)
    lengths = _word_lengths(words, t)  # the words view is built once (a copy for odd widths)
    offsets, padded = offsets_from_lengths(lengths)
    out = np.empty(padded, dtype=np.uint8)  # the kernel writes every byte of every row
    out[int(offsets[-1]):] = 0
    _pick(_encode, rows.shape[0])(np.ascontiguousarray(words), rows, t.row_nbytes, t.cols,
                                  t.header_bits, offsets, out)
    return out, offsets


def decode_rows(payload: np.ndarray, offsets: np.ndarray, out: np.ndarray,
                tables: "BitTables") -> None:
    """Decode into out, a (rows, row_nbytes) uint8 array."""
    t = tables
    wb = t.W // 8
    if out.shape[1] % wb == 0:
        words, rows = out.view(_WORD_DTYPE[t.W]), out
    else:
        words = np.empty((out.shape[0], t.n_words), dtype=_WORD_DTYPE[t.W])
        rows = words.view(np.uint8)
    _pick(_decode, out.shape[0])(payload, offsets, words, rows, t.row_nbytes, t.cols,
                                 t.header_bits)
    if rows is not out:
        out[:] = rows[:, : out.shape[1]]


def gather_rows(payload: np.ndarray, offsets: np.ndarray, idx: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """Compressed rows idx of (payload, offsets) as a new (payload, offsets), without decoding."""
    o = offsets.astype(np.int64, copy=False)
    lengths = o[idx + 1] - o[idx]
    new_offsets, padded = offsets_from_lengths(lengths)
    out = np.zeros(padded, dtype=np.uint8)
    _pick(_gather, idx.shape[0])(payload, offsets, idx, new_offsets, out)
    return out, new_offsets


class BitTables:
    """Per-column tables the CPU kernels need: mask, bitval, free-bit mask and count."""

    __slots__ = ("W", "n_words", "row_nbytes", "mask", "bitval", "free_mask", "free_bits",
                 "header_bits", "cols")

    def __init__(self, W: int, row_nbytes: int, mask: np.ndarray, bitval: np.ndarray):
        self.W = int(W)
        self.row_nbytes = int(row_nbytes)
        self.n_words = int(mask.shape[0])
        self.mask = np.ascontiguousarray(mask, dtype=np.uint64)
        self.bitval = np.ascontiguousarray(bitval, dtype=np.uint64)
        word = np.uint64(2**W - 1)
        self.free_mask = ~self.mask & word
        self.free_bits = np.array([bin(int(m)).count("1") for m in self.free_mask], dtype=np.int64)
        self.header_bits = -(-self.n_words // W) * W
        # one 32-byte entry per 64-bit unit (see _COL_BYTES): two words per unit when W = 32
        per = 64 // self.W
        n_units = -(-self.n_words // per)
        cols = np.zeros((n_units * per, 4), dtype=np.uint64)
        cols[: self.n_words, 0] = self.mask
        cols[: self.n_words, 1] = self.bitval
        cols[: self.n_words, 2] = self.free_mask
        if per == 2:  # word 2k in the low half, 2k + 1 in the high half
            cols = cols[0::2] | (cols[1::2] << np.uint64(32))
        self.cols = np.ascontiguousarray(cols)
