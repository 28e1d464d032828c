"""EBPCodec: Entropy Bit Packing, per-column prefix codes for the high bits of each element.

Each element (a W-bit word: the dtype's bits) is split into a high part, coded with a
short prefix code from a per-column dictionary (an escape code stores a rare high part
verbatim), and low bits stored verbatim at static positions. Rows that are mostly one
value per column (TF-IDF, bags of words) can instead list only their other elements
(sparse mode). Random access per row, like IBP; the row format is in docs/format.md.
"""
from __future__ import annotations

import hashlib
import json
import math
from typing import Optional, Sequence

import numpy as np
import torch

from . import ebp_kernels as K
from .base import (
    CorruptPayloadError,
    as_row_bytes,
    check_rows_tensor,
    dtype_from_name,
    dtype_name,
    itemsize,
    random_rows,
)
from .rows import RowCodec

#: elements fit() reads at most (rows x elements per row) when sample_rows is not given.
DEFAULT_SAMPLE_ELEMENTS = 1 << 21
#: rows fit() reads at most when sample_rows is not given.
DEFAULT_SAMPLE_ROWS = 65536
#: a column with fewer sampled non-default values shares the pooled sparse table.
MIN_SPARSE_SAMPLES = 32
#: high parts taking more distinct values on the sample than this are not tried.
MAX_DISTINCT = 4096
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def canonical_codes(lens: np.ndarray, has_esc: bool) -> list[tuple[int, int, int]]:
    """(dictionary index, code, length) of each symbol: canonical prefix code, MSB-first codes.

    Symbols are the dictionary indices 0..len(lens)-1 (lens[k] their lengths) and, with
    has_esc, the escape (index 255) whose length is lens[-1]. Order: by length, then index.
    """
    n_dict = len(lens) - (1 if has_esc else 0)
    syms = [(int(lens[k]), k) for k in range(n_dict)]
    if has_esc:
        syms.append((int(lens[-1]), K.ESC))
    syms.sort()
    out = []
    code = 0
    prev = syms[0][0] if syms else 0
    for ln, idx in syms:
        code <<= ln - prev
        out.append((idx, code, ln))
        code += 1
        prev = ln
    return out


def _lowmask(n: int) -> int:
    return (1 << n) - 1


class EBPTables:
    """Everything the CPU kernels (and the GPU tables) need, derived from the codec state."""

    def __init__(self, *, W: int, d: int, row_nbytes: int, col_tid, col_tids, col_default,
                 t_hw, t_size, t_esc, t_dict, t_len, sparse: bool, LS: int):
        self.W, self.d, self.row_nbytes = int(W), int(d), int(row_nbytes)
        self.sparse, self.LS = bool(sparse), int(LS)
        self.col_tid = np.ascontiguousarray(col_tid, dtype=np.int64)
        self.col_tids = np.ascontiguousarray(col_tids, dtype=np.int64)
        self.col_default = np.ascontiguousarray(col_default, dtype=np.uint64)
        self.t_hw = np.ascontiguousarray(t_hw, dtype=np.int64)
        self.t_size = np.ascontiguousarray(t_size, dtype=np.int64)
        self.t_esc = np.ascontiguousarray(t_esc, dtype=np.int64)
        self.t_dict = np.ascontiguousarray(t_dict, dtype=np.uint64)
        self.t_len = np.ascontiguousarray(t_len, dtype=np.int64)
        T = self.t_hw.shape[0]
        self.n_tables = T
        self.col_lw = (self.W - self.t_hw[self.col_tid]) if d else np.zeros(0, np.int64)
        self.col_lw = np.ascontiguousarray(self.col_lw, dtype=np.int64)
        self.low_total = int(self.col_lw.sum())
        dense_t = np.unique(self.col_tid) if d else np.zeros(0, np.int64)
        esc_hw = [int(self.t_hw[t]) for t in dense_t if self.t_esc[t]]
        self.HE = max(esc_hw) if esc_hw else 0
        self.IB = int(max(0, d - 1)).bit_length()
        # codes, decode tables, encode tables
        sizes = np.array([1 << min(int(h), K.ENC_BITS) for h in self.t_hw], dtype=np.int64)
        self.elut_off = np.zeros(T, dtype=np.int64)
        if T:
            self.elut_off[1:] = np.cumsum(sizes)[:-1]
        (self.t_code, self.dlut, self.elut, self.hpairs, self.hoff, self.hmask,
         self.esc_entry) = K.build_code_tables(self.t_size, self.t_esc, self.t_len, self.t_dict,
                                                sizes, self.elut_off)
        self.scratch_bytes = (d * (2 * self.W + 40) + 256) // 8 + 64
        # per-column kernel parameters (see ebp_kernels.C_* / M_*)
        hw = self.W - self.col_lw
        self.colp = np.zeros((d, K.N_COLP), dtype=np.int64)
        self.colm = np.zeros((d, 2), dtype=np.uint64)
        self.drec = np.zeros((d, K._REC_BYTES // 8), dtype=np.uint64)
        self.all_direct = bool(d == 0 or int(np.max(self.t_hw[self.col_tid])) <= K.ENC_BITS)
        if d:
            self.colp[:, K.C_LW] = self.col_lw
            self.colp[:, K.C_TID] = self.col_tid
            self.colp[:, K.C_TIDS] = self.col_tids
            for c0, tids, thw in ((K.C_D, self.col_tid, hw),
                                  (K.C_S, self.col_tids, np.full(d, self.W - self.LS))):
                self.colp[:, c0 + K.F_EOFF] = self.elut_off[tids]
                self.colp[:, c0 + K.F_DLIM] = 1 << np.minimum(thw, K.ENC_BITS)
                self.colp[:, c0 + K.F_HOFF] = self.hoff[tids]
                self.colp[:, c0 + K.F_HMASK] = self.hmask[tids]
                self.colp[:, c0 + K.F_ESCE] = self.esc_entry[tids]
            # where a column's high part goes in its row's 64-bit chunk (0 when it has none)
            in_chunk = (np.arange(d) * self.W) % 64
            self.colp[:, K.C_HSHIFT] = np.where(hw > 0, self.col_lw + in_chunk, 0)
            self.colm[:, K.M_HIMASK] = [_lowmask(int(b)) for b in hw]
            # the dense code writer's record per column (ebp_kernels.R_*)
            self.drec[:, K.R_SHIFT // 8] = self.col_lw & 63
            self.drec[:, K.R_DLIM // 8] = self.colp[:, K.C_D + K.F_DLIM]
            self.drec[:, K.R_EADDR // 8] = 2 * self.colp[:, K.C_D + K.F_EOFF]
            self.drec[:, K.R_HIMASK // 8] = self.colm[:, K.M_HIMASK]
            self.colm[:, K.M_DEFAULT] = self.col_default
            # dense code length (and escape flag) of each column's default value
            index = {}
            for j in range(d):
                t, lw = int(self.col_tid[j]), int(self.col_lw[j])
                hi = int(self.col_default[j]) >> lw if lw < 64 else 0
                if t not in index:
                    index[t] = {int(v): k for k, v in enumerate(self.t_dict[t, :self.t_size[t]])}
                k = index[t].get(hi)
                self.colp[j, K.C_DDEF] = self.t_len[t, K.ESC if k is None else k]
                self.colp[j, K.C_DDEFE] = int(k is None)
            # the shortest code of each column's dense table (the sparse/dense choice's bound)
            n_sym = self.t_size[self.col_tid]
            lens = np.where(np.arange(256)[None, :] < n_sym[:, None], self.t_len[self.col_tid],
                            np.iinfo(np.int64).max)
            lens[:, K.ESC] = np.where(self.t_esc[self.col_tid] != 0, self.t_len[self.col_tid, K.ESC],
                                      np.iinfo(np.int64).max)
            self.colp[:, K.C_DMIN] = lens.min(axis=1)
        # low bits of each 64-bit chunk of a row (elements never straddle chunks)
        n_chunks = -(-self.row_nbytes // 8)
        masks = [0] * n_chunks
        for j in range(d):
            bit = j * self.W
            masks[bit // 64] |= _lowmask(int(self.col_lw[j])) << (bit % 64)
        self.wmask = np.array(masks, dtype=np.uint64)
        self.wbits = np.array([bin(m).count("1") for m in masks], dtype=np.int64)


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
                t_len[t, K.ESC] = lens[-1]
        return t_hw, t_size, t_esc, t_dict, t_len


class EBPCodec(RowCodec):
    """Entropy Bit Packing for rows of one dtype and trailing shape (docs/format.md, EBP)."""

    name = "ebp"

    def __init__(self, *, dtype: torch.dtype, row_shape: Sequence[int], col_tid, col_tids,
                 col_default, t_hw, t_size, t_esc, t_dict, t_len, sparse: bool, sparse_low_bits: int):
        dtype_name(dtype)
        self.dtype = dtype
        self.row_shape = tuple(int(s) for s in row_shape)
        self.itemsize = itemsize(dtype)
        self.word_bits = 8 * self.itemsize
        self.n_cols = math.prod(self.row_shape)
        self.row_nbytes = self.n_cols * self.itemsize
        arrays = _validate_state(self.word_bits, self.n_cols, col_tid, col_tids, col_default,
                                 t_hw, t_size, t_esc, t_dict, t_len, sparse, sparse_low_bits)
        self._tables = EBPTables(W=self.word_bits, d=self.n_cols, row_nbytes=self.row_nbytes,
                                 sparse=bool(sparse), LS=int(sparse_low_bits), **arrays)

    # ---- fitted state ------------------------------------------------------
    @property
    def tables(self) -> EBPTables:
        """The derived tables the CPU kernels and the GPU decoder use."""
        return self._tables

    @property
    def sparse(self) -> bool:
        """Whether rows may use the sparse mode (one mode bit per row)."""
        return self._tables.sparse

    @property
    def n_tables(self) -> int:
        """Distinct code tables (columns with equal tables share one)."""
        return self._tables.n_tables

    @property
    def state_nbytes(self) -> int:
        """Bytes of state a decoder keeps: per column 3 ids and a default, per table its dictionary and lengths."""
        t = self._tables
        return int(self.n_cols * (4 + 4 + self.itemsize)
                   + int(t.t_size.sum()) * (self.itemsize + 1) + 4 * t.n_tables)

    @property
    def fingerprint(self) -> int:
        """63-bit hash of the state; CompressedTensors carry it to catch codec mix-ups."""
        try:
            return self._fingerprint
        except AttributeError:
            t = self._tables
            h = hashlib.blake2b(digest_size=8)
            h.update(json.dumps([self.name, dtype_name(self.dtype), list(self.row_shape),
                                 t.sparse, t.LS]).encode())
            for a in (t.col_tid, t.col_tids, t.col_default, t.t_hw, t.t_size, t.t_esc, t.t_dict,
                      t.t_len):
                h.update(np.ascontiguousarray(a).tobytes())
            self._fingerprint = int.from_bytes(h.digest(), "little") & (2**63 - 1)
            return self._fingerprint

    def __repr__(self) -> str:
        t = self._tables
        return (f"EBPCodec(dtype={self.dtype}, row_shape={self.row_shape}, tables={t.n_tables}, "
                f"low_bits={t.low_total}/{self.word_bits * self.n_cols}, sparse={t.sparse})")

    # ---- fit -----------------------------------------------------------------
    @classmethod
    def fit(cls, tensor: torch.Tensor, *, sparse: Optional[bool] = None,
            sample_rows: Optional[int] = None, seed: int = 0) -> "EBPCodec":
        """Learn per-column splits, dictionaries and codes on (a random sample of) the rows.

        For every column the number of verbatim low bits is chosen to minimise the coded
        size on the sample. ``sparse=None`` enables the sparse mode when it makes the
        sample smaller; True/False force it. At most `sample_rows` rows are read (default:
        up to 2**21 elements, at most 65536 rows, chosen with `seed`).
        """
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
        words = rows.view(_UINT[W // 8]).reshape(rows.shape[0], d)
        cols = np.ascontiguousarray(np.sort(words.astype(np.uint64), axis=0).T)  # (d, n)
        dense = _fit_dense(cols, W)
        candidates = []
        if sparse is not False and d > 0 and rows.shape[0] > 0:
            sp = _fit_sparse(cols, W, dense)
            if sp is not None:
                candidates.append(cls(dtype=tensor.dtype, row_shape=row_shape, sparse=True, **sp))
        if sparse is not True or not candidates:
            candidates.append(cls(dtype=tensor.dtype, row_shape=row_shape, sparse=False,
                                  sparse_low_bits=0, **_dense_state(dense, d)))
        if len(candidates) == 1:
            return candidates[0]
        sizes = [int(K.row_lengths(words, rows, c.tables).sum()) for c in candidates]
        return candidates[int(np.argmin(sizes))]

    # ---- encode / decode -----------------------------------------------------
    def _words(self, rows: np.ndarray) -> np.ndarray:
        return rows.view(_UINT[self.itemsize]).reshape(rows.shape[0], self.n_cols)

    # ---- RowCodec hooks -------------------------------------------------------------
    def _encode_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return K.encode_rows(self._words(rows), rows, self._tables)

    def _decode_rows(self, payload: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return K.decode_rows(payload, offsets, self._words(rows), rows, self._tables)

    # ---- state ------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to rebuild this codec (tensors and plain values)."""
        from .format import FORMAT_VERSION

        t = self._tables

        def ten(a, dt):
            return torch.from_numpy(np.ascontiguousarray(a).astype(dt))

        return {
            "format_version": FORMAT_VERSION,
            "codec": self.name,
            "dtype": dtype_name(self.dtype),
            "row_shape": list(self.row_shape),
            "sparse": t.sparse,
            "sparse_low_bits": t.LS,
            "col_tid": ten(t.col_tid, np.int32),
            "col_tids": ten(t.col_tids, np.int32),
            "col_default": torch.from_numpy(t.col_default.view(np.int64).copy()),
            "t_hw": ten(t.t_hw, np.int16),
            "t_size": ten(t.t_size, np.int16),
            "t_esc": ten(t.t_esc, np.uint8),
            "t_dict": torch.from_numpy(t.t_dict.view(np.int64).copy()),
            "t_len": ten(t.t_len, np.uint8),
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> "EBPCodec":
        """Rebuild a codec from state_dict(); refuse other codecs, versions and malformed tables."""
        from .format import check_state_header

        check_state_header(state, cls.name)
        try:
            def arr(k):
                v = state[k]
                return v.numpy() if isinstance(v, torch.Tensor) else np.asarray(v)

            return cls(dtype=dtype_from_name(state["dtype"]), row_shape=state["row_shape"],
                       sparse=bool(state["sparse"]), sparse_low_bits=int(state["sparse_low_bits"]),
                       col_tid=arr("col_tid"), col_tids=arr("col_tids"),
                       col_default=arr("col_default").view(np.uint64), t_hw=arr("t_hw"),
                       t_size=arr("t_size"), t_esc=arr("t_esc"),
                       t_dict=arr("t_dict").view(np.uint64).reshape(-1, 256),
                       t_len=arr("t_len").reshape(-1, 256))
        except KeyError as e:
            raise CorruptPayloadError(f"state_dict lacks the key {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            if isinstance(e, CorruptPayloadError):
                raise
            raise CorruptPayloadError(f"EBP state_dict is malformed: {e}") from None



# --------------------------------------------------------------------------- fitting
def _fit_dense(cols: np.ndarray, W: int) -> list[tuple[int, np.ndarray, np.ndarray, bool]]:
    """Per column: (high bits hw, dictionary values, code lengths, has escape)."""
    out = []
    for j in range(cols.shape[0]):
        seg = _segments(cols[j])
        lw, _ = K.best_split(cols[j], seg, W, K.LUT_BITS, 0, W, MAX_DISTINCT)
        dvals, lens, esc = K.build_table(cols[j], seg, lw, W, K.LUT_BITS)
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
            bits = K.split_bits(vals, seg, W, K.LUT_BITS, LS, MAX_DISTINCT)
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
            dvals, lens, esc = K.build_table(cols[j], segs[j], LS, W, K.LUT_BITS)
            col_tids[j] = ts.add(W - LS, dvals, lens, bool(esc))
        else:
            if pool_tid is None:
                dvals, lens, esc = K.build_table(pool, pool_seg, LS, W, K.LUT_BITS)
                pool_tid = ts.add(W - LS, dvals, lens, bool(esc))
            col_tids[j] = pool_tid
    t_hw, t_size, t_esc, t_dict, t_len = ts.arrays()
    return dict(col_tid=col_tid, col_tids=col_tids, col_default=defaults, t_hw=t_hw,
                t_size=t_size, t_esc=t_esc, t_dict=t_dict, t_len=t_len, sparse_low_bits=LS)


def _validate_state(W, d, col_tid, col_tids, col_default, t_hw, t_size, t_esc, t_dict, t_len,
                    sparse, LS) -> dict:
    """Check a state's arrays (shapes, ranges, prefix codes); ValueError naming what is wrong."""
    col_tid = np.asarray(col_tid, dtype=np.int64).reshape(-1)
    col_tids = np.asarray(col_tids, dtype=np.int64).reshape(-1)
    col_default = np.asarray(col_default).astype(np.uint64).reshape(-1)
    t_hw = np.asarray(t_hw, dtype=np.int64).reshape(-1)
    t_size = np.asarray(t_size, dtype=np.int64).reshape(-1)
    t_esc = np.asarray(t_esc, dtype=np.int64).reshape(-1)
    t_dict = np.asarray(t_dict).astype(np.uint64)
    t_len = np.asarray(t_len, dtype=np.int64)
    T = t_hw.shape[0]
    for name, a in (("col_tid", col_tid), ("col_tids", col_tids), ("col_default", col_default)):
        if a.shape != (d,):
            raise ValueError(f"{name} needs one entry per element of a row ({d}), has {a.shape[0]}")
    if t_size.shape != (T,) or t_esc.shape != (T,) or t_dict.shape != (T, 256) or \
            t_len.shape != (T, 256):
        raise ValueError(f"table arrays disagree: {T} tables, t_size {t_size.shape}, t_esc "
                         f"{t_esc.shape}, t_dict {t_dict.shape}, t_len {t_len.shape} "
                         "(expected (T,), (T,), (T, 256), (T, 256))")
    if d and T == 0:
        raise ValueError("a codec for non-empty rows needs at least one table")
    if not 0 <= int(LS) <= W:
        raise ValueError(f"sparse_low_bits={LS} is outside [0, {W}]")
    if d and ((col_tid < 0).any() or (col_tid >= T).any()):
        raise ValueError(f"col_tid has entries outside [0, {T})")
    if sparse and d and ((col_tids < 0).any() or (col_tids >= T).any()):
        raise ValueError(f"col_tids has entries outside [0, {T})")
    if W < 64 and (col_default >> np.uint64(W)).any():
        raise ValueError(f"col_default has values wider than {W} bits")
    for t in range(T):
        hw, n_dict, esc = int(t_hw[t]), int(t_size[t]), int(t_esc[t])
        if not 0 <= hw <= W:
            raise ValueError(f"table {t}: t_hw={hw} is outside [0, {W}]")
        if not 1 <= n_dict <= K.MAX_DICT or esc not in (0, 1):
            raise ValueError(f"table {t}: t_size={n_dict} (accepted 1..{K.MAX_DICT}), "
                             f"t_esc={esc} (accepted 0 or 1)")
        vals = t_dict[t, :n_dict]
        if hw < 64 and (vals >> np.uint64(hw)).any():
            raise ValueError(f"table {t}: dictionary values wider than its {hw} high bits")
        if len(np.unique(vals)) != n_dict:
            raise ValueError(f"table {t}: dictionary values repeat")
        if not esc and hw > 0 and (hw >= 64 or n_dict != (1 << hw)):
            raise ValueError(f"table {t}: without an escape the dictionary must hold all "
                             f"2**{hw} values")
        if hw == 0 and esc:
            raise ValueError(f"table {t}: a table with no high bits has no escape")
        lens = list(t_len[t, :n_dict]) + ([int(t_len[t, K.ESC])] if esc else [])
        if len(lens) == 1:
            if lens[0] != 0:
                raise ValueError(f"table {t}: a single symbol has code length 0")
        elif min(lens) < 1 or max(lens) > K.LUT_BITS or \
                sum(2.0 ** -int(x) for x in lens) > 1.0:
            raise ValueError(f"table {t}: code lengths {lens} are not a prefix code of at most "
                             f"{K.LUT_BITS} bits")
    if sparse and d:
        bad = [int(t) for t in np.unique(col_tids) if int(t_hw[t]) != W - int(LS)]
        if bad:
            raise ValueError(f"sparse tables {bad} have t_hw != {W} - sparse_low_bits")
    if (t_dict[:, K.ESC] != 0).any() if T else False:
        raise ValueError("t_dict[:, 255] must be 0 (index 255 is the escape)")
    return dict(col_tid=col_tid, col_tids=col_tids if sparse else np.zeros(d, np.int64),
                col_default=col_default if sparse else np.zeros(d, np.uint64), t_hw=t_hw,
                t_size=t_size, t_esc=t_esc, t_dict=t_dict, t_len=t_len)
