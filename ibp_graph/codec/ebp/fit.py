"""Fitting EBP: per column the low/high split and code table, the sparse mode's defaults and
tables, tables shared by content, and the choice between dense-only and sparse."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from ...layout.dtypes import as_row_bytes, check_rows_tensor, itemsize
from ..base import DEFAULT_SAMPLE_ROWS, random_rows
from .codes import ENC_BITS, ESC, LUT_BITS, LUT_SIZE
from .encode import row_lengths
from ...resources import available_memory
from .huffman import best_split, build_table, split_bits

#: elements fit() reads at most (rows x elements per row) when sample_rows is not given.
DEFAULT_SAMPLE_ELEMENTS = 1 << 21
#: a column with fewer sampled non-default values shares the pooled sparse table.
MIN_SPARSE_SAMPLES = 32
#: high parts taking more distinct values on the sample than this are not tried.
MAX_DISTINCT = 4096
UINT_DTYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
#: bytes per column a codec's build holds besides its tables: its records and the (columns, 256)
#: code-length arrays EBPTables.build works on (the fit's memory is checked against it and _table_bytes).
COLUMN_BUILD_BYTES = 3 * 256 * 8 + 256


def _table_bytes(hw: int, size: int) -> int:
    """Bytes one table of `size` dictionary values takes in a built codec: dictionary, code lengths and
    codes (256 entries each), decode table, direct encode table, hash slots."""
    slots = max(4, 1 << (2 * (size + 1) - 1).bit_length())
    return 3 * 256 * 8 + 2 * LUT_SIZE + 2 * (1 << min(hw, ENC_BITS)) + 16 * slots


def _check_codec_memory(tables, d: int, mode: str) -> None:
    """Refuse, before its tables are built, a codec (`tables`: (hw, size) of each distinct table) that
    would not fit in the available memory; rows of distinct columns take about 22 KB per column."""
    need = sum(_table_bytes(hw, size) for hw, size in tables) + d * COLUMN_BUILD_BYTES
    available = available_memory()
    if need > available:
        raise MemoryError(f"EBP fit ({mode}) of rows of {d:,} columns ({len(tables):,} distinct tables) needs "
                          f"about {need:,} bytes for its codec tables, {available:,} bytes of memory are "
                          "available; use the ibp or identity codec for rows this wide")


def _dense_tables(dense) -> list[tuple[int, int]]:
    """(hw, size) of the distinct tables of a dense fit (as _TableSet keeps them)."""
    return list({(hw, esc, dvals.tobytes(), lens.tobytes()): (hw, len(dvals))
                 for hw, dvals, lens, esc in dense}.values())


def _segments(sorted_col: np.ndarray, skip: Optional[tuple[int, int]] = None) -> np.ndarray:
    n = sorted_col.shape[0]
    if skip is None:
        return np.array([0, n], dtype=np.int64)
    return np.array([0, skip[0], skip[1], n], dtype=np.int64)


def _longest_run(sorted_col: np.ndarray) -> tuple[int, int, int]:
    """(value, start, end) of the longest run of equal values (first one on ties)."""
    n = sorted_col.shape[0]
    if n == 0:
        return 0, 0, 0
    change = np.flatnonzero(sorted_col[1:] != sorted_col[:-1]) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [n]])
    k = int(np.argmax(ends - starts))
    return int(sorted_col[starts[k]]), int(starts[k]), int(ends[k])


class _TableSet:
    """Tables deduplicated by content while fitting."""

    def __init__(self):
        self.keys: dict[bytes, int] = {}
        self.rows: list[tuple[int, np.ndarray, np.ndarray, bool]] = []

    def add(self, hw: int, dvals: np.ndarray, lens: np.ndarray, esc: bool) -> int:
        key = np.int64(hw).tobytes() + bytes([esc]) + dvals.tobytes() + b"|" + \
            lens.astype(np.int64).tobytes()
        got = self.keys.get(key)
        if got is None:
            got = len(self.rows)
            self.keys[key] = got
            self.rows.append((hw, dvals, lens, esc))
        return got

    def arrays(self):
        T = len(self.rows)
        t_hw = np.zeros(T, np.int64)
        t_size = np.zeros(T, np.int64)
        t_esc = np.zeros(T, np.int64)
        t_dict = np.zeros((T, 256), np.uint64)
        t_len = np.zeros((T, 256), np.int64)
        for t, (hw, dvals, lens, esc) in enumerate(self.rows):
            t_hw[t], t_size[t], t_esc[t] = hw, len(dvals), int(esc)
            t_dict[t, :len(dvals)] = dvals
            t_len[t, :len(dvals)] = lens[:len(dvals)]
            if esc:
                t_len[t, ESC] = lens[-1]
        return t_hw, t_size, t_esc, t_dict, t_len


# --------------------------------------------------------------------------- fitting
def _fit_dense(cols: np.ndarray, W: int) -> list[tuple[int, np.ndarray, np.ndarray, bool]]:
    """Per column: (high bits hw, dictionary values, code lengths, has escape)."""
    out = []
    for j in range(cols.shape[0]):
        seg = _segments(cols[j])
        lw, _ = best_split(cols[j], seg, W, LUT_BITS, 0, W, MAX_DISTINCT)
        dvals, lens, esc = build_table(cols[j], seg, lw, W, LUT_BITS)
        out.append((W - lw, dvals, lens, bool(esc)))
    return out


def _dense_state(dense, d: int) -> dict:
    ts = _TableSet()
    col_tid = np.array([ts.add(*c) for c in dense], dtype=np.int64)
    t_hw, t_size, t_esc, t_dict, t_len = ts.arrays()
    return dict(col_tid=col_tid, col_tids=np.zeros(d, np.int64), col_default=np.zeros(d, np.uint64),
                t_hw=t_hw, t_size=t_size, t_esc=t_esc, t_dict=t_dict, t_len=t_len)


def _fit_sparse(cols: np.ndarray, W: int, dense) -> Optional[dict]:
    """The sparse-mode state (defaults, low bits, value tables) or None when no column has a usual value."""
    d, n = cols.shape
    runs = [_longest_run(cols[j]) for j in range(d)]
    nnz = sum(n - (e - s) for _, s, e in runs)
    if nnz > 0.5 * n * d:  # most elements differ from their column's usual value: not sparse data
        return None
    defaults = np.array([v for v, _, _ in runs], dtype=np.uint64)
    segs = [_segments(cols[j], (s, e)) for j, (_, s, e) in enumerate(runs)]
    counts = np.array([n - (e - s) for _, s, e in runs])
    big = counts >= MIN_SPARSE_SAMPLES
    # pooled values of the small columns, sorted
    pool_parts = [np.concatenate([cols[j][seg[0]:seg[1]], cols[j][seg[2]:seg[3]]])
                  for j, seg in enumerate(segs) if not big[j]]
    pool = np.sort(np.concatenate(pool_parts)) if pool_parts else np.zeros(0, np.uint64)
    pool_seg = _segments(pool)
    best = None
    for LS in range(W, -1, -1):
        total = 0
        ok = True
        groups = [(cols[j], segs[j]) for j in range(d) if big[j]]
        if pool.size:
            groups.append((pool, pool_seg))
        for vals, seg in groups:
            bits = split_bits(vals, seg, W, LUT_BITS, LS, MAX_DISTINCT)
            if bits < 0:  # too many distinct high parts at this split
                ok = False
                break
            total += bits
        if not ok:
            break
        if best is None or total < best[0]:
            best = (total, LS)
    if best is None:
        return None
    LS = best[1]
    ts = _TableSet()
    col_tid = np.array([ts.add(*c) for c in dense], dtype=np.int64)
    pool_tid = None
    col_tids = np.zeros(d, np.int64)
    for j in range(d):
        if big[j]:
            dvals, lens, esc = build_table(cols[j], segs[j], LS, W, LUT_BITS)
            col_tids[j] = ts.add(W - LS, dvals, lens, bool(esc))
        else:
            if pool_tid is None:
                dvals, lens, esc = build_table(pool, pool_seg, LS, W, LUT_BITS)
                pool_tid = ts.add(W - LS, dvals, lens, bool(esc))
            col_tids[j] = pool_tid
    t_hw, t_size, t_esc, t_dict, t_len = ts.arrays()
    return dict(col_tid=col_tid, col_tids=col_tids, col_default=defaults, t_hw=t_hw,
                t_size=t_size, t_esc=t_esc, t_dict=t_dict, t_len=t_len, sparse_low_bits=LS)


def fit_ebp(cls, tensor: torch.Tensor, *, sparse: Optional[bool], sample_rows: Optional[int],
            seed: int):
    """EBPCodec.fit (cls: the codec class): per-column splits, dictionaries and codes on a sample."""
    check_rows_tensor(tensor)
    if tensor.device.type != "cpu":
        raise ValueError(f"tensor is on {tensor.device}; fit runs on CPU tensors")
    if sparse not in (None, True, False):
        raise ValueError(f"sparse={sparse!r} is not accepted; use None, True or False")
    if sample_rows is not None and (not isinstance(sample_rows, int) or isinstance(sample_rows, bool)
                                    or sample_rows < 1):
        raise ValueError(f"sample_rows={sample_rows!r} is not accepted; use None or an int >= 1")
    row_shape = tuple(tensor.shape[1:])
    d = math.prod(row_shape)
    if sample_rows is None:
        limit = max(256, min(DEFAULT_SAMPLE_ROWS, DEFAULT_SAMPLE_ELEMENTS // max(d, 1)))
    else:
        limit = sample_rows
    sample = random_rows(tensor, limit, seed)
    rows = as_row_bytes(sample)
    W = 8 * itemsize(tensor.dtype)
    words = rows.view(UINT_DTYPES[W // 8]).reshape(rows.shape[0], d)
    cols = np.ascontiguousarray(np.sort(words.astype(np.uint64), axis=0).T)  # (d, n)
    dense = _fit_dense(cols, W)
    dense_tables = _dense_tables(dense)
    _check_codec_memory(dense_tables, d, "dense")
    candidates = []
    if sparse is not False and d > 0 and rows.shape[0] > 0:
        sp = _fit_sparse(cols, W, dense)
        if sp is not None:
            _check_codec_memory(list(zip(sp["t_hw"].tolist(), sp["t_size"].tolist())) + dense_tables, d, "sparse")
            candidates.append(cls(dtype=tensor.dtype, row_shape=row_shape, sparse=True, **sp))
    if sparse is not True or not candidates:
        candidates.append(cls(dtype=tensor.dtype, row_shape=row_shape, sparse=False,
                              sparse_low_bits=0, **_dense_state(dense, d)))
    if len(candidates) == 1:
        return candidates[0]
    sizes = [int(row_lengths(words, rows, c.tables).sum()) for c in candidates]
    return candidates[int(np.argmin(sizes))]
