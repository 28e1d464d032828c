"""IBP on the GPU: the decoder's tables built from an IBP codec, launch shapes, and the launch
of ``ibp_decode_w{W}_g{G}`` (kernels/ibp_decode.cu).

:func:`host_tables` is the one place that reads an IBP codec's state; everything after it
works from the :class:`IBPGpuTables` record (cached on each device by ``tables``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from . import abi
from . import runtime as rt
from .operands import RowSource

#: word widths the decoder is instantiated for.
WORD_BITS = (32, 64)


@dataclass(frozen=True)
class IBPGpuTables:
    """What the IBP decoder needs of a codec: its sizes, and the column and run tables
    (numpy arrays on the host; uint8 tensors of the same bytes once on a device)."""

    word_bits: int
    n_words: int
    row_nbytes: int
    header_bits: int
    cols: object   # abi.IBP_COLUMN per column
    runs: object   # uint32 per further run (at least one entry)


def free_bit_runs(mask: int, word_bits: int) -> list[tuple[int, int]]:
    """Runs (shift, length) of the free (zero) bits of a W-bit mask, ascending.

    pdep(c, ~mask) is then: for each run, take the next `length` bits of c and place
    them at `shift`. An all-ones mask has no runs; mask 0 has one run (0, W).
    """
    runs = []
    b = 0
    mask = int(mask)
    while b < word_bits:
        if (mask >> b) & 1:
            b += 1
            continue
        start = b
        while b < word_bits and not (mask >> b) & 1:
            b += 1
        runs.append((start, b - start))
    return runs


def build_decode_tables(mask: np.ndarray, bitval: np.ndarray, word_bits: int
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Per-column tables of the GPU decoder: (cols: abi.IBP_COLUMN per column, runs: uint32).

    A column's record holds its bitval, its free-bit count, number of runs and run 0
    (``widths``), and where its further runs start in `runs`; a runs entry packs
    shift | length << 8 | src << 16 (src: the run's first bit in the compacted value).
    Bit layout: abi's WIDTHS_* / RUN_* constants, documented in kernels/ibp_decode.cuh.
    """
    if word_bits not in WORD_BITS:
        raise ValueError(f"word_bits={word_bits!r} is not accepted; use 32 or 64")
    mask = np.ascontiguousarray(mask, dtype=np.uint64).reshape(-1)
    bitval = np.ascontiguousarray(bitval, dtype=np.uint64).reshape(-1)
    if mask.shape != bitval.shape:
        raise ValueError(f"mask has {mask.shape[0]} columns but bitval has {bitval.shape[0]}")
    n = mask.shape[0]
    W = word_bits
    if W == 32 and ((mask >> np.uint64(32)).any() or (bitval >> np.uint64(32)).any()):
        raise ValueError("mask/bitval have bits above bit 31 with word_bits=32")
    cols = np.zeros(n, dtype=abi.IBP_COLUMN)
    cols["bitval_lo"] = (bitval & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    cols["bitval_hi"] = (bitval >> np.uint64(32)).astype(np.uint32)
    extra: list[int] = []
    # Vectorised run finding: free[j, b] is True where bit b of column j is free.
    bits = np.arange(W, dtype=np.uint64)
    free = ((mask[:, None] >> bits[None, :]) & np.uint64(1)) == 0
    prev = np.zeros((n, 1), dtype=bool)
    starts = free & ~np.concatenate([prev, free[:, :-1]], axis=1)
    ends = free & ~np.concatenate([free[:, 1:], prev], axis=1)  # last bit of each run
    nfree = free.sum(axis=1)
    for j in range(n):
        s = np.flatnonzero(starts[j])
        lengths = np.flatnonzero(ends[j]) - s + 1
        nr = len(s)
        z = int(nfree[j]) | (nr << abi.WIDTHS_RUNS_SHIFT)
        if nr:
            z |= (int(s[0]) | (int(lengths[0]) << abi.RUN0_SHIFT_BITS)) << abi.WIDTHS_RUN0_SHIFT
        cols["widths"][j] = z
        cols["runs_at"][j] = len(extra)
        src = int(lengths[0]) if nr else 0
        for k in range(1, nr):
            extra.append(int(s[k]) | (int(lengths[k]) << abi.RUN_LENGTH_SHIFT)
                         | (src << abi.RUN_SRC_SHIFT))
            src += int(lengths[k])
    runs = np.array(extra or [0], dtype=np.uint32)
    return cols, runs


def host_tables(codec) -> IBPGpuTables:
    """The IBP decoder's record of `codec` (the one place that reads an IBP codec's state)."""
    word_bits = int(codec.word_bits)
    if word_bits not in WORD_BITS:
        raise ValueError(f"codec.word_bits={word_bits!r}; the GPU decoder takes {WORD_BITS}")
    cols, runs = build_decode_tables(codec.mask, codec.bitval, word_bits)
    expect = np.asarray(codec.free_bits).reshape(-1).astype(np.uint32)
    if not np.array_equal(cols["widths"] & 0xFF, expect):
        raise ValueError("codec.free_bits disagrees with W - popcount(codec.mask); the codec "
                         "state is inconsistent")
    return IBPGpuTables(word_bits=word_bits, n_words=int(codec.n_words),
                     row_nbytes=int(codec.row_nbytes), header_bits=int(codec.header_bits),
                     cols=cols, runs=runs)


# --------------------------------------------------------------------------- launch shapes
def group_size(n_words: int) -> int:
    """Lanes per row: the next power of two >= n_words, at most a warp."""
    return 1 << max(0, min(5, math.ceil(math.log2(max(1, n_words)))))


def stage_bytes(row_nbytes: int) -> int:
    """Shared memory per row group: the row, its 16-byte alignment slack and read-ahead."""
    return (row_nbytes + 32 + 15) // 16 * 16


def store_unit(word_bytes: int, row_nbytes: int, ptr: int) -> int:
    """Widest store (bytes) that divides the word, the row and the output's alignment."""
    for u in (8, 4, 2, 1):
        if u <= word_bytes and row_nbytes % u == 0 and ptr % u == 0:
            return u
    return 1


def launch_decode(tabs: IBPGpuTables, src: RowSource, out: torch.Tensor, err: torch.Tensor,
                  device: torch.device) -> None:
    """Queue one ibp_decode launch: rows `src` decoded into `out`, errors into `err`."""
    W, row_nbytes = tabs.word_bits, tabs.row_nbytes
    G = group_size(tabs.n_words)
    kernel = rt.get_kernel(f"ibp_decode_w{W}_g{G}", device.index)
    cap = stage_bytes(row_nbytes)
    threads = abi.MAX_THREADS
    while threads > 32 and (threads // G) * cap > rt.DEFAULT_SHARED:
        threads //= 2
    smem = (threads // G) * cap
    if smem > rt.DEFAULT_SHARED:
        limit = rt.max_shared_optin(device.index)
        if smem > limit:
            raise ValueError(
                f"rows of {row_nbytes} bytes need {smem} bytes of shared memory per block to "
                f"decode; {device} allows {limit}. Accepted: rows up to about "
                f"{limit - 48} bytes (split wider rows into several tensors)")
        rt.ensure_shared(kernel, smem)
    groups = threads // G
    grid = min(-(-src.n_out // groups),
               rt.occupancy(kernel, threads, smem) * rt.sm_count(device.index))
    rt.launch(kernel, grid, threads, dict(
        src.args(), cols=tabs.cols.data_ptr(), runs=tabs.runs.data_ptr(), n_words=tabs.n_words,
        row_nbytes=row_nbytes, header_bits=tabs.header_bits,
        store_unit=store_unit(W // 8, row_nbytes, int(out.data_ptr())), cap_bytes=cap,
        out=out.data_ptr(), err=err.data_ptr(),
    ), shared_mem=smem)
