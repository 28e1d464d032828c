"""EBPTables: the decode (and encode) tables of an EBP codec as one frozen record, and the
per-column records the numba kernels read.

Each per-column record is declared once as a numpy structured dtype; the kernels get it
as a plain (d, fields) integer array (a view of the records) and index it with the field
numbers derived here (C_*, M_*, R_*). Changing a record's fields changes those numbers.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .codes import ENC_BITS, ESC, build_code_tables


def _field_index(record: np.dtype, name: str) -> int:
    """The 8-byte word of `record` that holds field `name` (every field is 8 bytes)."""
    return record.fields[name][1] // 8


#: the table fields _entry reads for one of a column's tables (dense or sparse), in order:
#: encode-table offset, direct-lookup limit, hash-table offset, hash mask, escape entry.
TABLE_FIELDS = ("eoff", "dlim", "hoff", "hmask", "esce")

#: one record per column (int64 fields): low bits, dense and sparse table ids, where the high
#: part goes in its 64-bit chunk, the dense (d_*) and sparse (s_*) TABLE_FIELDS, the dense code
#: length of the column's default and whether it escapes, and the shortest dense code.
COLUMN_RECORD = np.dtype(
    [("lw", "<i8"), ("tid", "<i8"), ("tids", "<i8"), ("hshift", "<i8")]
    + [("d_" + f, "<i8") for f in TABLE_FIELDS] + [("s_" + f, "<i8") for f in TABLE_FIELDS]
    + [("ddef", "<i8"), ("ddefe", "<i8"), ("dmin", "<i8")])
C_LW, C_TID, C_TIDS, C_HSHIFT = (_field_index(COLUMN_RECORD, n) for n in ("lw", "tid", "tids", "hshift"))
C_DDEF, C_DDEFE, C_DMIN = (_field_index(COLUMN_RECORD, n) for n in ("ddef", "ddefe", "dmin"))
#: first word of a column's dense / sparse table fields; F_* is a field's word within them.
C_D, C_S = _field_index(COLUMN_RECORD, "d_eoff"), _field_index(COLUMN_RECORD, "s_eoff")
F_EOFF, F_DLIM, F_HOFF, F_HMASK, F_ESCE = (_field_index(COLUMN_RECORD, "d_" + f) - C_D
                                           for f in TABLE_FIELDS)
if [_field_index(COLUMN_RECORD, "s_" + f) - C_S for f in TABLE_FIELDS] != \
        [F_EOFF, F_DLIM, F_HOFF, F_HMASK, F_ESCE]:  # pragma: no cover - a declaration error
    raise ImportError("COLUMN_RECORD: the sparse table fields must follow the dense ones' order")

#: one record per column (uint64 fields): the mask of its high part's bits, its default value.
COLUMN_MASKS = np.dtype([("himask", "<u8"), ("default", "<u8")])
M_HIMASK, M_DEFAULT = _field_index(COLUMN_MASKS, "himask"), _field_index(COLUMN_MASKS, "default")

#: the dense code writer's record per column (uint64 fields; R_* are byte offsets): low bits
#: (the shift to the high part), direct-lookup limit, byte offset of the column's encode
#: entries in elut (encode_rows passes a copy holding their address instead), high-part mask.
DENSE_RECORD = np.dtype([("shift", "<u8"), ("dlim", "<u8"), ("eaddr", "<u8"), ("himask", "<u8")])
R_SHIFT, R_DLIM, R_EADDR, R_HIMASK = (DENSE_RECORD.fields[n][1] for n in DENSE_RECORD.names)
REC_BYTES = DENSE_RECORD.itemsize


def low_bits_mask(n: int) -> int:
    """The n low bits set (a Python int)."""
    return (1 << n) - 1


def _records(record: np.dtype, d: int, word: type) -> tuple[np.ndarray, np.ndarray]:
    """(records, their (d, words) integer view) of d zeroed records."""
    rec = np.zeros(d, dtype=record)
    return rec, rec.view(word).reshape(d, record.itemsize // 8)


@dataclass(frozen=True, eq=False)
class EBPTables:
    """Everything the CPU kernels and a GPU decoder need, derived from an EBP codec's state;
    never modified after build.

    State (as fitted): W (element bits), d (elements per row), row_nbytes, sparse, LS (low
    bits of a sparse element), col_tid / col_tids (dense / sparse table of each column),
    col_default (each column's usual value), t_hw, t_size, t_esc, t_dict, t_len (per table:
    high bits, dictionary size, escape flag, dictionary (T, 256), code lengths (T, 256)).
    Derived: n_tables, col_lw (low bits per column), low_total, HE (escape width), IB
    (index bits), elut_off, t_code, dlut (decode tables (T, 256) uint16), elut, hpairs,
    hoff, hmask, esc_entry (encode tables), scratch_bytes, colp / colm / drec (the kernels'
    per-column records: COLUMN_RECORD, COLUMN_MASKS, DENSE_RECORD), all_direct, wmask and
    wbits (the low bits of each 64-bit chunk of a row, and their count).
    """

    W: int
    d: int
    row_nbytes: int
    sparse: bool
    LS: int
    col_tid: np.ndarray
    col_tids: np.ndarray
    col_default: np.ndarray
    t_hw: np.ndarray
    t_size: np.ndarray
    t_esc: np.ndarray
    t_dict: np.ndarray
    t_len: np.ndarray
    n_tables: int
    col_lw: np.ndarray
    low_total: int
    HE: int
    IB: int
    elut_off: np.ndarray
    t_code: np.ndarray
    dlut: np.ndarray
    elut: np.ndarray
    hpairs: np.ndarray
    hoff: np.ndarray
    hmask: np.ndarray
    esc_entry: np.ndarray
    scratch_bytes: int
    colp: np.ndarray
    colm: np.ndarray
    drec: np.ndarray
    all_direct: bool
    wmask: np.ndarray
    wbits: np.ndarray

    @classmethod
    def build(cls, *, W: int, d: int, row_nbytes: int, col_tid, col_tids, col_default, t_hw,
              t_size, t_esc, t_dict, t_len, sparse: bool, LS: int) -> "EBPTables":
        """The tables of a (validated) state; see the class docstring for the fields."""
        W, d, row_nbytes, sparse, LS = int(W), int(d), int(row_nbytes), bool(sparse), int(LS)
        col_tid = np.ascontiguousarray(col_tid, dtype=np.int64)
        col_tids = np.ascontiguousarray(col_tids, dtype=np.int64)
        col_default = np.ascontiguousarray(col_default, dtype=np.uint64)
        t_hw = np.ascontiguousarray(t_hw, dtype=np.int64)
        t_size = np.ascontiguousarray(t_size, dtype=np.int64)
        t_esc = np.ascontiguousarray(t_esc, dtype=np.int64)
        t_dict = np.ascontiguousarray(t_dict, dtype=np.uint64)
        t_len = np.ascontiguousarray(t_len, dtype=np.int64)
        T = t_hw.shape[0]
        col_lw = np.ascontiguousarray((W - t_hw[col_tid]) if d else np.zeros(0, np.int64),
                                      dtype=np.int64)
        dense_t = np.unique(col_tid) if d else np.zeros(0, np.int64)
        esc_hw = [int(t_hw[t]) for t in dense_t if t_esc[t]]
        # codes, decode tables, encode tables
        sizes = np.array([1 << min(int(h), ENC_BITS) for h in t_hw], dtype=np.int64)
        elut_off = np.zeros(T, dtype=np.int64)
        if T:
            elut_off[1:] = np.cumsum(sizes)[:-1]
        t_code, dlut, elut, hpairs, hoff, hmask, esc_entry = build_code_tables(
            t_size, t_esc, t_len, t_dict, sizes, elut_off)
        # per-column kernel records
        hw = W - col_lw
        colp_rec, colp = _records(COLUMN_RECORD, d, np.int64)
        colm_rec, colm = _records(COLUMN_MASKS, d, np.uint64)
        drec_rec, drec = _records(DENSE_RECORD, d, np.uint64)
        if d:
            colp_rec["lw"] = col_lw
            colp_rec["tid"] = col_tid
            colp_rec["tids"] = col_tids
            for pre, tids, thw in (("d_", col_tid, hw), ("s_", col_tids, np.full(d, W - LS))):
                colp_rec[pre + "eoff"] = elut_off[tids]
                colp_rec[pre + "dlim"] = 1 << np.minimum(thw, ENC_BITS)
                colp_rec[pre + "hoff"] = hoff[tids]
                colp_rec[pre + "hmask"] = hmask[tids]
                colp_rec[pre + "esce"] = esc_entry[tids]
            # where a column's high part goes in its row's 64-bit chunk (0 when it has none)
            in_chunk = (np.arange(d) * W) % 64
            colp_rec["hshift"] = np.where(hw > 0, col_lw + in_chunk, 0)
            colm_rec["himask"] = [low_bits_mask(int(b)) for b in hw]
            colm_rec["default"] = col_default
            drec_rec["shift"] = col_lw & 63
            drec_rec["dlim"] = colp_rec["d_dlim"]
            drec_rec["eaddr"] = 2 * colp_rec["d_eoff"]
            drec_rec["himask"] = colm_rec["himask"]
            # dense code length (and escape flag) of each column's default value
            index = {}
            for j in range(d):
                t, lw = int(col_tid[j]), int(col_lw[j])
                hi = int(col_default[j]) >> lw if lw < 64 else 0
                if t not in index:
                    index[t] = {int(v): k for k, v in enumerate(t_dict[t, :t_size[t]])}
                k = index[t].get(hi)
                colp_rec["ddef"][j] = t_len[t, ESC if k is None else k]
                colp_rec["ddefe"][j] = int(k is None)
            # the shortest code of each column's dense table (the sparse/dense choice's bound)
            n_sym = t_size[col_tid]
            lens = np.where(np.arange(256)[None, :] < n_sym[:, None], t_len[col_tid],
                            np.iinfo(np.int64).max)
            lens[:, ESC] = np.where(t_esc[col_tid] != 0, t_len[col_tid, ESC], np.iinfo(np.int64).max)
            colp_rec["dmin"] = lens.min(axis=1)
        # low bits of each 64-bit chunk of a row (elements never straddle chunks)
        n_chunks = -(-row_nbytes // 8)
        masks = [0] * n_chunks
        for j in range(d):
            bit = j * W
            masks[bit // 64] |= low_bits_mask(int(col_lw[j])) << (bit % 64)
        return cls(
            W=W, d=d, row_nbytes=row_nbytes, sparse=sparse, LS=LS, col_tid=col_tid,
            col_tids=col_tids, col_default=col_default, t_hw=t_hw, t_size=t_size, t_esc=t_esc,
            t_dict=t_dict, t_len=t_len, n_tables=T, col_lw=col_lw, low_total=int(col_lw.sum()),
            HE=max(esc_hw) if esc_hw else 0, IB=int(max(0, d - 1)).bit_length(),
            elut_off=elut_off, t_code=t_code, dlut=dlut, elut=elut, hpairs=hpairs, hoff=hoff,
            hmask=hmask, esc_entry=esc_entry, scratch_bytes=(d * (2 * W + 40) + 256) // 8 + 64,
            colp=colp, colm=colm, drec=drec,
            all_direct=bool(d == 0 or int(np.max(t_hw[col_tid])) <= ENC_BITS),
            wmask=np.array(masks, dtype=np.uint64),
            wbits=np.array([bin(m).count("1") for m in masks], dtype=np.int64))
