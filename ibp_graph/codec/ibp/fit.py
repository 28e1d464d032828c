"""Fitting IBP: invariant bits by the paper's threshold rule, swept over thresholds and word widths."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ...layout.dtypes import as_row_bytes, check_rows_tensor
from ..base import DEFAULT_SAMPLE_ROWS, random_rows
from .encode import bit_counts, row_lengths

#: thresholds swept by fit() when none is given (the paper's sweep).
THRESHOLDS: tuple[float, ...] = (0.70, 0.75, 0.80, 0.85, 0.90, 0.95)
#: word widths tried by fit() when none is given.
WORD_BITS: tuple[int, ...] = (32, 64)


def invariant_bits(counts: np.ndarray, n_rows: int, threshold: float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(mask, bitval) per column from per-bit one-counts, by the paper's threshold rule."""
    W = counts.shape[1]
    ones = counts > threshold * n_rows
    zeros = counts < (1.0 - threshold) * n_rows
    weights = np.uint64(1) << np.arange(W, dtype=np.uint64)
    mask = ((ones | zeros).astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)
    bitval = (ones.astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)
    return mask, bitval


def fit_ibp(cls, tensor: torch.Tensor, *, word_bits: Optional[int], threshold: Optional[float],
            sample_rows: Optional[int], seed: int):
    """IBPCodec.fit (cls: the codec class): the (word width, threshold) with the fewest bytes on a sample."""
    check_rows_tensor(tensor)
    if tensor.device.type != "cpu":
        raise ValueError(f"tensor is on {tensor.device}; fit runs on CPU tensors")
    if word_bits is not None and word_bits not in WORD_BITS:
        raise ValueError(f"word_bits={word_bits!r} is not accepted; use None or one of {WORD_BITS}")
    if threshold is not None and not (0.5 <= float(threshold) <= 1.0):
        raise ValueError(f"threshold={threshold!r} is not accepted; use None or a number in [0.5, 1]")
    if sample_rows is not None and (not isinstance(sample_rows, int) or sample_rows < 1):
        raise ValueError(f"sample_rows={sample_rows!r} is not accepted; use None or an int >= 1")
    limit = DEFAULT_SAMPLE_ROWS if sample_rows is None else sample_rows
    sample = random_rows(tensor, limit, seed)
    rows = as_row_bytes(sample)
    row_shape = tuple(tensor.shape[1:])
    best = None
    for W in (WORD_BITS if word_bits is None else (word_bits,)):
        counts = bit_counts(rows, W)
        for t in (THRESHOLDS if threshold is None else (float(threshold),)):
            mask, bitval = invariant_bits(counts, rows.shape[0], t)
            cand = cls(dtype=tensor.dtype, row_shape=row_shape, word_bits=W, mask=mask,
                       bitval=bitval, threshold=t)
            size = int(row_lengths(rows, cand.tables).sum())
            if best is None or size < best[0]:
                best = (size, cand)
    return best[1]
