"""EBP prefix codes: the format's code constants and the lookup tables built from a state's
code lengths (canonical codes, decode tables, encode tables and their hash tables)."""
from __future__ import annotations

import numpy as np
from numba import njit

from ...jit_cache import install as _install_kernel_cache

_install_kernel_cache()  # numba caches this module's kernels per environment (ibp_graph.jit_cache)

#: longest code (bits); the decode table of a column has 2**LUT_BITS entries.
LUT_BITS = 8


#: entries of a decode table (one per value of the next LUT_BITS stream bits)
LUT_SIZE = 1 << LUT_BITS


#: dictionary index that means "escape: the high part is stored verbatim".
ESC = 255


#: most dictionary entries of one table (indices 0..254).
MAX_DICT = 255


#: high parts below 2**ENC_BITS are looked up directly when encoding; larger ones are searched.
ENC_BITS = 12


#: rows the decoder sorts into raw/sparse and dense (decoded four at a time) per task
DEC_BLOCK = 256


#: decode-table entry of a bit pattern no code starts with (only possible in a corrupt table).
BAD_ENTRY = 0xFFFF

#: multiplier of the encoder's hash of high parts (Fibonacci hashing).
HASH_MUL = np.uint64(0x9E3779B97F4A7C15)


#: flag of an occupied slot in an encode hash table.
SLOT_USED = 1 << 15


@njit(inline="always")
def hash_high(hi):
    """Slot hash of a high part in an encode hash table (Fibonacci hashing)."""
    return np.int64((hi * HASH_MUL) >> np.uint64(40))


@njit(cache=True)
def build_code_tables(t_size, t_esc, t_len, t_dict, sizes, elut_off):
    """Canonical codes and the lookup tables of every table (docs/format.md, EBP codes).

    Returns (codes, dlut, elut, hpairs, hoff, hmask, esc_entry): codes[t, idx] the code of
    dictionary index idx (255: the escape) bit-reversed for the LSB-first stream; dlut[t,
    bits] the decode entry idx | length << 8 of the code the next LUT_BITS stream bits
    start with (BAD_ENTRY if none); elut the direct encode entries (code | length << 8 |
    escape << 12) of the high parts below sizes[t], at elut_off[t]; hpairs the (value,
    entry | SLOT_USED) slots of an open-addressing hash table per table (at hoff[t],
    hmask[t] + 1 slots) for the high parts beyond the direct range; esc_entry[t] the escape's
    encode entry.
    """
    T = t_size.shape[0]
    codes = np.zeros((T, 256), dtype=np.int64)
    dlut = np.full((T, 1 << LUT_BITS), BAD_ENTRY, dtype=np.uint16)
    total = 0
    for t in range(T):
        total += sizes[t]
    elut = np.zeros(total + 4, dtype=np.uint16)  # +4: the encoder loads 8 bytes
    hoff = np.zeros(T, dtype=np.int64)
    hmask = np.zeros(T, dtype=np.int64)
    hslots = 0
    for t in range(T):
        h = 4
        while h < 2 * (t_size[t] + 1):
            h *= 2
        hoff[t] = hslots
        hmask[t] = h - 1
        hslots += h
    hpairs = np.zeros((hslots, 2), dtype=np.uint64)
    esc_entry = np.zeros(T, dtype=np.int64)
    syms = np.empty(256, dtype=np.int64)
    keys = np.empty(256, dtype=np.int64)
    for t in range(T):
        n_dict = t_size[t]
        m = 0
        for k in range(n_dict):
            syms[m] = k
            keys[m] = t_len[t, k] * 256 + k
            m += 1
        if t_esc[t]:
            syms[m] = ESC
            keys[m] = t_len[t, ESC] * 256 + ESC
            m += 1
        order = np.argsort(keys[:m], kind="mergesort")  # by length, then index
        code = 0
        prev = t_len[t, syms[order[0]]] if m else 0
        for q in range(m):
            idx = syms[order[q]]
            ln = t_len[t, idx]
            code <<= ln - prev
            prev = ln
            rev = 0
            c = code
            for _ in range(ln):
                rev = (rev << 1) | (c & 1)
                c >>= 1
            code += 1
            codes[t, idx] = rev
            entry = idx | (ln << 8)
            for f in range(1 << (LUT_BITS - ln)):
                dlut[t, rev | (f << ln)] = entry
        esc = 0
        if t_esc[t]:
            esc = codes[t, ESC] | (t_len[t, ESC] << 8) | (1 << 12)
        esc_entry[t] = esc
        base = elut_off[t]
        for v in range(sizes[t]):
            elut[base + v] = esc
        for k in range(n_dict):
            v = t_dict[t, k]
            ent = codes[t, k] | (t_len[t, k] << 8)
            if v < np.uint64(sizes[t]):
                elut[base + np.int64(v)] = ent
            slot = hash_high(v) & hmask[t]
            while hpairs[hoff[t] + slot, 1] != 0:
                slot = (slot + 1) & hmask[t]
            hpairs[hoff[t] + slot, 0] = v
            hpairs[hoff[t] + slot, 1] = ent | SLOT_USED
    return codes, dlut, elut, hpairs, hoff, hmask, esc_entry
