"""The condensed-row layout shared by every codec with offsets (docs/format.md, "Row layout").

Row ``i`` of a payload is ``payload[offsets[i]:offsets[i+1]]``; offsets start at 0, never
decrease, and the payload holds at least PAYLOAD_TAIL bytes past the last row. This module
builds offsets, validates them, and gathers rows without decoding them, condensed rows
(``gather_condensed_rows``) and fixed-stride raw rows of any dtype as bytes
(``gather_fixed_rows``).
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch
from numba import njit, prange

from .buffers import empty_bytes
from .bitstream import build_kernels, copy_bytes, pick_kernel, prefetch
from .errors import CorruptPayloadError
from ..jit_cache import install as _install_kernel_cache

_install_kernel_cache()  # numba caches this module's kernels per environment (ibp_graph.jit_cache)

#: payload bytes past the last row (at least), so decoders may read two whole 64-bit words past any bit.
#: A valid row's decoding reads nothing past these bytes; a corrupt one's may, and the CPU decoders read the
#: rows near the payload's end from a zero-padded copy (padded_end), so no read leaves the payload whatever it
#: holds (tests/codec/test_out_of_bounds.py, with guard pages).
PAYLOAD_TAIL = 16
#: a decoder's `dest` for rows decoded in order (row i into out[i]); a non-empty dest puts row i at out[dest[i]].
NO_DEST = np.zeros(0, np.int64)
#: integer dtypes an offsets array may have (int32 below 2 GiB of rows, else int64).
OFFSET_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


@njit(inline="always")
def padded_end(payload, reach):
    """(far, tail, near_end) for a CPU decoder whose reads of a row span at most `reach` bytes from its start,
    whatever the row holds: a row starting at byte `far` or before is read in the payload itself, a later one
    in near_end, a copy of the payload's bytes from `tail` on followed by `reach` zero bytes (row_address). A
    valid row reads nothing past its PAYLOAD_TAIL bytes, so it decodes the same from either."""
    far = payload.shape[0] - reach
    tail = max(far, 0)
    near_end = np.zeros(payload.shape[0] - tail + reach, dtype=np.uint8)
    near_end[:payload.shape[0] - tail] = payload[tail:]
    return far, tail, near_end


@njit(inline="always")
def row_address(start, base, far, near, tail):
    """The address of the row starting at byte `start`: in the payload (address base), or in its padded copy
    (address near) past byte `far` (padded_end)."""
    return base + start if start <= far else near + (start - tail)


def padded_size(nbytes: int) -> int:
    """A payload's size for `nbytes` of rows: with the decoders' tail padding (PAYLOAD_TAIL), 8-byte aligned."""
    return (nbytes + PAYLOAD_TAIL + 7) // 8 * 8


def offsets_from_lengths(lengths: np.ndarray) -> tuple[np.ndarray, int]:
    """Row offsets (int32 below 2 GiB of rows, else int64) and the padded payload size."""
    total = int(lengths.sum()) if lengths.size else 0
    dtype = np.int32 if total < 2**31 else np.int64
    offsets = np.zeros(lengths.shape[0] + 1, dtype=dtype)
    np.cumsum(lengths, out=offsets[1:])
    return offsets, padded_size(total)


def empty_rows(n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(payload, offsets) of n_rows rows of zero bytes: offsets all 0, the payload only its tail."""
    offsets, padded = offsets_from_lengths(np.zeros(n_rows, np.int64))
    return np.zeros(padded, np.uint8), offsets


def check_offsets_array(offsets: np.ndarray, payload_nbytes: int, row_nbytes: int,
                        argname: str = "offsets") -> None:
    """Refuse offsets that are not 1-d int32/int64, do not start at 0, decrease, give a row
    more than row_nbytes bytes, or leave fewer than PAYLOAD_TAIL payload bytes past the last
    row (CorruptPayloadError naming the first bad entry). One vectorized pass."""
    if not isinstance(offsets, np.ndarray) or offsets.ndim != 1 or offsets.dtype not in OFFSET_DTYPES:
        what = f"dtype={offsets.dtype} shape={offsets.shape}" if isinstance(offsets, np.ndarray) \
            else type(offsets).__name__
        raise CorruptPayloadError(f"{argname} is {what}; accepted: a 1-d int32 or int64 array")
    if offsets.shape[0] == 0:
        raise CorruptPayloadError(f"{argname} is empty; accepted: n_rows + 1 >= 1 entries")
    if offsets[0] != 0:
        raise CorruptPayloadError(f"{argname}[0] is {int(offsets[0])}, must be 0")
    d = np.diff(offsets.astype(np.int64, copy=False))
    bad = (d < 0) | (d > row_nbytes)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise CorruptPayloadError(f"{argname} gives row {i} the length {int(d[i])} "
                                  f"({argname}[{i}]={int(offsets[i])}, {argname}[{i + 1}]="
                                  f"{int(offsets[i + 1])}); lengths must lie in [0, row_nbytes="
                                  f"{row_nbytes}]")
    need = int(offsets[-1]) + PAYLOAD_TAIL
    if payload_nbytes < need:
        raise CorruptPayloadError(f"the payload has {payload_nbytes} bytes; {argname} needs at "
                                  f"least {need} (rows plus {PAYLOAD_TAIL} bytes of tail padding)")


#: torch's uint64 (torch 2.3 and later; None before, where no tensor has it).
_UINT64 = getattr(torch, "uint64", None)


def check_row_index(rows, n_rows: int, argname: str = "rows") -> np.ndarray:
    """Validate a 1-d integer row index against n_rows; return it as contiguous int64 numpy."""
    if isinstance(rows, np.ndarray):
        rows = torch.from_numpy(rows)
    if not isinstance(rows, torch.Tensor):
        raise TypeError(f"{argname} must be a 1-d integer tensor, got {type(rows).__name__}")
    if rows.dim() != 1 or rows.dtype.is_floating_point or rows.dtype == torch.bool or rows.is_complex():
        raise TypeError(f"{argname} must be a 1-d integer tensor, got dtype={rows.dtype} "
                        f"shape={tuple(rows.shape)}")
    if rows.dtype == _UINT64 and rows.numel():  # ids of 2**63 and more would wrap to negative int64
        top = int(rows.detach().cpu().numpy().max())
        if top >= n_rows:
            raise IndexError(f"{argname} contains {top}, outside the valid range [0, {n_rows})")
    idx = rows.detach().to("cpu", torch.int64).numpy()
    if idx.size:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= n_rows:
            bad = lo if lo < 0 else hi
            raise IndexError(f"{argname} contains {bad}, outside the valid range [0, {n_rows})")
    return np.ascontiguousarray(idx)


def check_out_rows(out_rows, n_rows: int, out_n_rows: int) -> np.ndarray:
    """Validate `out_rows`, the rows of an output buffer of `out_n_rows` rows that `n_rows` decoded rows go to
    (one distinct row each); return it as contiguous int64 numpy."""
    dest = check_row_index(out_rows, out_n_rows, "out_rows")
    if dest.shape[0] != n_rows:
        raise ValueError(f"out_rows has {dest.shape[0]} entries; accepted: one per decoded row ({n_rows})")
    seen = np.zeros(out_n_rows, bool)
    seen[dest] = True
    if int(np.count_nonzero(seen)) != n_rows:
        raise ValueError("out_rows names a row of out more than once; accepted: distinct rows (two decoded rows "
                         "cannot go to one place)")
    return dest


#: rows prefetched ahead of the one being copied: a random row gather is bound by memory
#: latency, and prefetching keeps several rows in flight (1.9 -> 5 GB/s per core, 512 B rows).
PREFETCH_ROWS = 8


def _gather_impl(payload, starts, new_offsets, out):
    """Copy the rows starting at starts[k] (new_offsets[k + 1] - new_offsets[k] bytes) to out,
    prefetching row k + PREFETCH_ROWS's cache lines while row k is copied."""
    src0 = np.int64(payload.ctypes.data)
    dst0 = np.int64(out.ctypes.data)
    n = starts.shape[0]
    for k in prange(n):
        j = k + PREFETCH_ROWS
        if j < n:
            a = src0 + starts[j]
            end = a + (new_offsets[j + 1] - new_offsets[j])
            while a < end:
                prefetch(a)
                a += 64
        copy_bytes(dst0 + new_offsets[k], src0 + starts[k], new_offsets[k + 1] - new_offsets[k])


_gather = build_kernels(_gather_impl)


#: raw rows prefetched ahead of the one being copied. Measured on one core (2 GB table, 434k
#: random rows, vs torch.index_select): 8 B rows 0.20 -> 0.46 GB/s, 36 B 0.61 -> 1.14, 512 B
#: 3.98 -> 5.89, 2048 B 3.74 -> 5.67 (notes in README, "Row gathers").
RAW_PREFETCH_ROWS = 16
#: above this row size torch's index_select (a memcpy per row) is as fast as the prefetching
#: gather (3072 B rows: 5.04 vs 4.50 GB/s), and it is used instead.
RAW_GATHER_MAX_ROW_NBYTES = 2048
#: the widest word a fixed-stride gather copies with (row size and addresses divisible by it).
_WORDS = ((8, np.uint64), (4, np.uint32), (2, np.uint16), (1, np.uint8))


def _gather_fixed_impl(src, idx, out):
    """out[k] = src[idx[k]] for 2-d word arrays, prefetching row k + RAW_PREFETCH_ROWS's cache
    lines while row k is copied; a row index outside [0, len(src)) is counted and skipped.
    Returns how many there were."""
    n_rows = src.shape[0]
    width = src.shape[1]
    src0 = np.int64(src.ctypes.data)
    row_nbytes = np.int64(width * src.itemsize)
    n = idx.shape[0]
    bad = 0
    for k in prange(n):
        j = k + RAW_PREFETCH_ROWS
        if j < n:  # a prefetch never faults, even at a bad index
            a = src0 + idx[j] * row_nbytes
            end = a + row_nbytes
            while a < end:
                prefetch(a)
                a += 64
        r = idx[k]
        if r < 0 or r >= n_rows:
            bad += 1
        else:
            for q in range(width):
                out[k, q] = src[r, q]
    return bad


_gather_fixed = build_kernels(_gather_fixed_impl)


def gather_fixed_rows(src: np.ndarray, idx: np.ndarray, out: np.ndarray, argname: str = "index") -> np.ndarray:
    """out[k] = src[idx[k]] for C-contiguous 2-d uint8 arrays of one row size (raw rows of any
    dtype, as bytes), idx 1-d int64; returns out. An index outside [0, len(src)) raises
    IndexError naming `argname` (out's content is then undefined). Rows up to
    RAW_GATHER_MAX_ROW_NBYTES bytes are copied by a prefetching numba kernel in whole words,
    longer rows by torch.index_select."""
    for name, a in (("src", src), ("out", out)):
        if not isinstance(a, np.ndarray) or a.dtype != np.uint8 or a.ndim != 2 or not a.flags.c_contiguous:
            raise TypeError(f"{name} must be a C-contiguous 2-d uint8 array, got "
                            f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")
    if idx.dtype != np.int64 or idx.ndim != 1:
        raise TypeError(f"{argname} must be a 1-d int64 array, got {idx.dtype} {idx.shape}")
    if out.shape != (idx.shape[0], src.shape[1]):
        raise ValueError(f"out has shape {out.shape}; {idx.shape[0]} rows of {src.shape[1]} bytes "
                         f"need ({idx.shape[0]}, {src.shape[1]})")
    row_nbytes = src.shape[1]
    if idx.shape[0] == 0 or row_nbytes == 0 or row_nbytes > RAW_GATHER_MAX_ROW_NBYTES:
        _check_index(idx, src.shape[0], argname)
        if idx.shape[0] and row_nbytes:
            torch.index_select(torch.from_numpy(src), 0, torch.from_numpy(idx), out=torch.from_numpy(out))
        return out
    word = next(w for s, w in _WORDS if row_nbytes % s == 0
                and src.ctypes.data % s == 0 and out.ctypes.data % s == 0)
    idx = np.ascontiguousarray(idx)
    bad = pick_kernel(_gather_fixed, idx.shape[0])(src.view(word), idx, out.view(word))
    if bad:
        _check_index(idx, src.shape[0], argname)
    return out


def _check_index(idx: np.ndarray, n_rows: int, argname: str) -> None:
    """IndexError naming the first entry of idx outside [0, n_rows), if any."""
    wrong = (idx < 0) | (idx >= n_rows)
    if wrong.any():
        k = int(np.flatnonzero(wrong)[0])
        raise IndexError(f"{argname}[{k}] is {int(idx[k])}, outside the valid range [0, {n_rows})")


@njit(cache=True, nogil=True)
def _row_bounds(offsets, idx, payload_nbytes, starts, lengths):
    """starts[k], lengths[k] of rows idx[k]; (k, 0) at the first row index out of range,
    (k, 1) at the first row outside the payload or of negative length, (-1, -1) if none.
    One pass, one load pair per row: the gather's bounds cost next to nothing."""
    n_rows = offsets.shape[0] - 1
    for k in range(idx.shape[0]):
        r = idx[k]
        if r < 0 or r >= n_rows:
            return k, 0
        s = np.int64(offsets[r])
        e = np.int64(offsets[r + 1])
        starts[k] = s
        lengths[k] = e - s
        if s < 0 or e < s or e > payload_nbytes:
            return k, 1
    return -1, -1


def condensed_row_bounds(payload: np.ndarray, offsets: np.ndarray, idx: np.ndarray,
                         argname: str = "offsets") -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of rows idx (int64), refusing a row index out of range (IndexError)
    and a row outside the payload or of negative length (CorruptPayloadError): one pass over
    the selected rows only, never the whole table."""
    if not isinstance(offsets, np.ndarray) or offsets.ndim != 1 or offsets.dtype not in OFFSET_DTYPES:
        raise CorruptPayloadError(f"{argname} must be a 1-d int32 or int64 array, got "
                                  f"{getattr(offsets, 'dtype', type(offsets).__name__)}")
    starts = np.empty(idx.shape[0], np.int64)
    lengths = np.empty(idx.shape[0], np.int64)
    k, what = _row_bounds(offsets, idx, payload.shape[0], starts, lengths)
    if k >= 0:
        r = int(idx[k])
        if what == 0:
            raise IndexError(f"rows contains {r}, outside the valid range [0, {offsets.shape[0] - 1})")
        raise CorruptPayloadError(
            f"{argname}[{r}]={int(offsets[r])}, {argname}[{r + 1}]={int(offsets[r + 1])}: row {r} "
            f"lies outside the payload of {payload.shape[0]} bytes or has a negative length; "
            "offsets must be non-decreasing and within the payload")
    return starts, lengths


def gather_condensed_rows(payload: np.ndarray, offsets: np.ndarray, idx: np.ndarray,
                          alloc: Optional[Callable[[int], np.ndarray]] = None
                          ) -> tuple[np.ndarray, np.ndarray]:
    """Compressed rows idx of (payload, offsets) as a new (payload, offsets), without decoding.

    Never reads or writes outside its buffers: the selected rows' bounds are checked first
    (condensed_row_bounds), then one numba kernel copies them. Each output byte is written
    once: the rows fill the payload back to back and only the tail padding is zeroed. The
    table's offsets are read as they are (int32 or int64), never converted. `alloc(nbytes)`
    gives the output payload (a 1-d uint8 array of that size; e.g. a view of a shared-memory
    slot), else it is a new array (buffers.empty_bytes).
    """
    if payload.dtype != np.uint8 or payload.ndim != 1 or not payload.flags.c_contiguous:
        raise CorruptPayloadError(f"payload must be a contiguous 1-d uint8 array, got dtype={payload.dtype} "
                                  f"shape={payload.shape} strides={payload.strides} (the gather reads it by address)")
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    starts, lengths = condensed_row_bounds(payload, offsets, idx)
    new_offsets, padded = offsets_from_lengths(lengths)
    out = empty_bytes(padded) if alloc is None else alloc(padded)
    if out.dtype != np.uint8 or out.shape != (padded,) or not out.flags.c_contiguous:
        raise ValueError(f"alloc({padded}) gave a {out.dtype} array of shape {out.shape}; "
                         f"a contiguous 1-d uint8 array of {padded} bytes is needed")
    out[int(new_offsets[-1]):] = 0  # the rows fill everything before the tail padding
    pick_kernel(_gather, idx.shape[0])(payload, starts, new_offsets, out)
    return out, new_offsets
