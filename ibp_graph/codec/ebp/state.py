"""Validation of an EBP codec state (shapes, ranges, prefix codes) before any table is built."""
from __future__ import annotations

import numpy as np

from .codes import ESC, LUT_BITS, MAX_DICT


def validate_state(W, d, col_tid, col_tids, col_default, t_hw, t_size, t_esc, t_dict, t_len,
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
        if not 1 <= n_dict <= MAX_DICT or esc not in (0, 1):
            raise ValueError(f"table {t}: t_size={n_dict} (accepted 1..{MAX_DICT}), "
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
        lens = list(t_len[t, :n_dict]) + ([int(t_len[t, ESC])] if esc else [])
        if len(lens) == 1:
            if lens[0] != 0:
                raise ValueError(f"table {t}: a single symbol has code length 0")
        elif min(lens) < 1 or max(lens) > LUT_BITS or \
                sum(2.0 ** -int(x) for x in lens) > 1.0:
            raise ValueError(f"table {t}: code lengths {lens} are not a prefix code of at most "
                             f"{LUT_BITS} bits")
    if sparse and d:
        bad = [int(t) for t in np.unique(col_tids) if int(t_hw[t]) != W - int(LS)]
        if bad:
            raise ValueError(f"sparse tables {bad} have t_hw != {W} - sparse_low_bits")
    if (t_dict[:, ESC] != 0).any() if T else False:
        raise ValueError("t_dict[:, 255] must be 0 (index 255 is the escape)")
    return dict(col_tid=col_tid, col_tids=col_tids if sparse else np.zeros(d, np.int64),
                col_default=col_default if sparse else np.zeros(d, np.uint64), t_hw=t_hw,
                t_size=t_size, t_esc=t_esc, t_dict=t_dict, t_len=t_len)
