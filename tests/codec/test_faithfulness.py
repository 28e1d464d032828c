"""IBPCodec against an independent, slow, obviously correct reading of the paper's size rules.

The reference below shares no code with ibp_graph.codec: it counts bits with numpy,
derives mask and bitval with the paper's threshold rule, and sizes each row as a
participation-bit header (rounded up to the word) plus free bits for participating
words and W bits for exceptions, in whole bytes, falling back to raw when that is not
smaller. The codec's payload must be within 0.2 percentage points of raw size of it,
and its per-row metadata may add at most 4 bytes per row.
"""
import numpy as np
import pytest
import torch

from ibp_graph.codec import IBPCodec
from ibp_graph.data.synthetic import FAMILIES, make_family

SWEEP = (0.70, 0.75, 0.80, 0.85, 0.90, 0.95)


def words_of(x: torch.Tensor, W: int) -> np.ndarray:
    """(rows, n_words) uint64 words of the rows, last word zero-padded."""
    flat = x.reshape(x.shape[0], -1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    raw = flat.contiguous().view(torch.uint8).numpy()
    wb = W // 8
    n_words = -(-raw.shape[1] // wb)
    padded = np.zeros((raw.shape[0], n_words * wb), dtype=np.uint8)
    padded[:, : raw.shape[1]] = raw
    out = np.zeros((raw.shape[0], n_words), dtype=np.uint64)
    for k in range(wb):  # little-endian assembly, byte by byte
        out |= padded[:, k::wb].astype(np.uint64) << np.uint64(8 * k)
    return out


def reference_payload_bytes(x: torch.Tensor, W: int) -> int:
    """Fewest payload bytes over the threshold sweep, by the paper's rules."""
    words = words_of(x, W)
    n, n_words = words.shape
    row_nbytes = x[0].numel() * x.element_size()
    ones = np.stack([((words >> np.uint64(b)) & np.uint64(1)).sum(axis=0) for b in range(W)], axis=1)
    header = -(-n_words // W) * W
    best = None
    for t in SWEEP:
        mask = np.zeros(n_words, dtype=np.uint64)
        bitval = np.zeros(n_words, dtype=np.uint64)
        for j in range(n_words):
            for b in range(W):
                if ones[j, b] > t * n:
                    mask[j] |= np.uint64(1 << b)
                    bitval[j] |= np.uint64(1 << b)
                elif ones[j, b] < (1 - t) * n:
                    mask[j] |= np.uint64(1 << b)
        free = np.array([W - bin(int(m)).count("1") for m in mask])
        part = (words & mask) == bitval
        bits = header + np.where(part, free, W).sum(axis=1)
        nbytes = -(-bits // 8)
        size = int(np.where(nbytes >= row_nbytes, row_nbytes, nbytes).sum())
        best = size if best is None else min(best, size)
    return best


ROWS = {"binary_bow": 1500, "tfidf": 4000}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("W", [32, 64])
def test_payload_matches_the_papers_rules(family, W):
    x = make_family(family, ROWS.get(family, 8000), seed=11)
    raw = x.numel() * x.element_size()
    ref = reference_payload_bytes(x, W)
    ct = IBPCodec.fit(x, word_bits=W).encode(x)
    payload_rows = int(ct.offsets[-1])
    assert abs(payload_rows - ref) / raw <= 0.002, (family, W, payload_rows / raw, ref / raw)
    metadata = ct.nbytes - payload_rows
    assert metadata <= 4 * ct.n_rows + 4 + 23  # 4 bytes a row, plus one offset and the padding
