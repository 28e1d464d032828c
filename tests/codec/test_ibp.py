"""IBPCodec: bit-exact round trips (property-based), the row format, sizes, state, bad input."""
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ibp_graph.codec import (
    CorruptPayloadError,
    IBPCodec,
    IdentityCodec,
    SUPPORTED_DTYPES,
)
from ibp_graph.codec.ibp import fit as ibp_fit
from ibp_graph.layout import bitstream
from ibp_graph.layout.rows import PAYLOAD_TAIL

DTYPES = list(SUPPORTED_DTYPES.values())


def as_bytes(t: torch.Tensor) -> bytes:
    """The exact bits of a tensor (bool and bfloat16 included)."""
    flat = t.contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def from_bytes(raw: bytes, shape, dtype) -> torch.Tensor:
    buf = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    if dtype == torch.bool:
        return buf.view(torch.bool).reshape(shape)
    return buf.view(dtype).reshape(shape) if buf.numel() else torch.empty(shape, dtype=dtype)


# A float's adversarial bit patterns: NaN payloads, +-0, +-inf, subnormals, extremes.
SPECIAL_BITS = {
    torch.float32: [0x7FC00001, 0xFFC12345, 0x7F800001, 0x80000000, 0x00000000, 0x7F800000,
                    0xFF800000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF],
    torch.float64: [0x7FF8000000000001, 0xFFF0000000000001, 0x8000000000000000, 0x7FF0000000000000,
                    0xFFF0000000000000, 0x0000000000000001, 0x800FFFFFFFFFFFFF],
    torch.float16: [0x7E01, 0xFC01, 0x8000, 0x7C00, 0xFC00, 0x0001, 0x83FF],
    torch.bfloat16: [0x7FC1, 0xFF81, 0x8000, 0x7F80, 0xFF80, 0x0001, 0x807F],
}


@st.composite
def row_tensors(draw, dtype=None):
    """A tensor of rows: any supported dtype, odd shapes, structured + random + special bits."""
    dtype = dtype or draw(st.sampled_from(DTYPES))
    n = draw(st.integers(0, 40))
    trailing = draw(st.sampled_from([(), (1,), (3,), (7,), (16,), (33,), (2, 5), (65,), (0,)]))
    shape = (n,) + trailing
    size = math.prod(shape)
    item = torch.empty((), dtype=dtype).element_size()
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    kind = draw(st.sampled_from(["random", "structured", "special", "constant"]))
    if kind == "random":
        raw = rng.integers(0, 256, size * item, dtype=np.uint8)
    elif kind == "constant":
        raw = np.tile(rng.integers(0, 256, item, dtype=np.uint8), size)
    else:
        # low-entropy values (the compressible case): small ints / narrow floats
        if dtype.is_floating_point:
            vals = torch.from_numpy(rng.normal(0, 0.1, size)).to(dtype)
        elif dtype == torch.bool:
            vals = torch.from_numpy(rng.random(size) < 0.2)
        else:
            vals = torch.from_numpy(rng.integers(0, 8, size)).to(dtype)
        raw = np.frombuffer(as_bytes(vals), dtype=np.uint8).copy()
        if kind == "special" and dtype in SPECIAL_BITS and size:
            words = raw.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[item])
            where = rng.random(size) < 0.3
            words[where] = rng.choice(np.array(SPECIAL_BITS[dtype], dtype=words.dtype), where.sum())
    if dtype == torch.bool:
        raw = (raw & 1).astype(np.uint8)  # torch bools hold 0/1
    return from_bytes(raw.tobytes(), shape, dtype)


def roundtrip(codec, x):
    """Encode and decode x: the codec's name and fingerprint on the rows, x's exact bits back."""
    ct = codec.encode(x)
    assert ct.codec == codec.name and ct.fingerprint == codec.fingerprint
    y = codec.decode(ct)
    assert y.dtype == x.dtype and tuple(y.shape) == tuple(x.shape)
    assert as_bytes(y) == as_bytes(x)
    return ct


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=row_tensors(), word_bits=st.sampled_from([None, 32, 64]),
       threshold=st.sampled_from([None, 0.7, 0.95, 1.0, 0.5]))
def test_roundtrip_bit_exact_fitted_on_same_data(x, word_bits, threshold):
    codec = IBPCodec.fit(x, word_bits=word_bits, threshold=threshold)
    roundtrip(codec, x)


def special_value_rows(dtype: torch.dtype, starts=(0,)) -> torch.Tensor:
    """257 rows of 9 typical values of `dtype` (seeded), a float dtype's SPECIAL_BITS written
    at each flat position in `starts`."""
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.normal(0, 1, (257, 9))).to(dtype) if dtype.is_floating_point \
        else torch.from_numpy(rng.integers(0, 100, (257, 9))).to(dtype)
    if dtype in SPECIAL_BITS:
        item = x.element_size()
        bits = x.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[item])
        specials = torch.tensor(np.array(SPECIAL_BITS[dtype], dtype=np.uint64).astype(np.int64))
        for start in starts:
            bits.view(-1)[start:start + len(specials)] = specials.to(bits.dtype)
    return x


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_all_special_values(dtype):
    x = special_value_rows(dtype)
    for W in (32, 64):
        roundtrip(IBPCodec.fit(x, word_bits=W), x)


def test_format_worked_example():
    """One row worked by hand from docs/format.md, so every decoder shares the same bits."""
    # two uint32 words per row, W=32; column 0: top 24 bits invariant = 0; column 1: none
    mask = np.array([0xFFFFFF00, 0x00000000], dtype=np.uint64)
    bitval = np.array([0, 0], dtype=np.uint64)
    codec = IBPCodec(dtype=torch.int32, row_shape=(2,), word_bits=32, mask=mask, bitval=bitval)
    x = torch.tensor([[0x000000AB, 0x12345678],   # word 0 participates: 8 bits stored
                      [0x010000AB, 0x12345678]],  # word 0 is an exception: 32 bits stored
                     dtype=torch.int32)
    ct = codec.encode(x)
    # row 0: header 32 bits = 0b11 (both participate), then 0xAB (8 bits), then 0x12345678
    # -> 32 + 8 + 32 = 72 bits = 9 bytes < 8 raw bytes? no: 9 >= 8, so row 0 is stored raw.
    # row 1: header 0b10, 32 bits of word 0, 32 bits of word 1 -> 96 bits: raw too.
    assert ct.row_lengths().tolist() == [8, 8]
    # widen the rows so the header pays off: 4 words, columns 0..3 as column 0 above
    mask4 = np.array([0xFFFFFF00] * 4, dtype=np.uint64)
    codec4 = IBPCodec(dtype=torch.int32, row_shape=(4,), word_bits=32, mask=mask4,
                      bitval=np.zeros(4, dtype=np.uint64))
    y = torch.tensor([[0xAB, 0xCD, 0x01, 0x7FFFFFFF]], dtype=torch.int32)
    ct4 = codec4.encode(y)
    # header: words 0,1,2 participate (bits 0..2 set), word 3 does not -> 0b0111
    # body: 0xAB, 0xCD, 0x01 as 8 bits each, then 0x7FFFFFFF as 32 bits
    # -> 32 + 24 + 32 = 88 bits = 11 bytes
    expected = bytes([0x07, 0, 0, 0, 0xAB, 0xCD, 0x01, 0xFF, 0xFF, 0xFF, 0x7F])
    assert ct4.row_lengths().tolist() == [11]
    assert ct4.payload[:11].numpy().tobytes() == expected
    assert ct4.payload.numel() % 8 == 0 and ct4.payload.numel() >= 11 + PAYLOAD_TAIL
    assert ct4.offsets.tolist() == [0, 11] and ct4.offsets.dtype == torch.int32
    assert as_bytes(codec4.decode(ct4)) == as_bytes(y)


def reference_encode_row(words: list[int], mask, bitval, W: int, row_nbytes: int) -> bytes:
    """docs/format.md "One row", read literally: Python ints, one bit at a time."""
    n_words = len(words)
    header_bits = -(-n_words // W) * W
    bits = []
    part = [(x & int(mask[j])) == int(bitval[j]) for j, x in enumerate(words)]
    bits += [int(p) for p in part] + [0] * (header_bits - n_words)
    for j, x in enumerate(words):
        if part[j]:
            bits += [(x >> b) & 1 for b in range(W) if not (int(mask[j]) >> b) & 1]
        else:
            bits += [(x >> b) & 1 for b in range(W)]
    L = -(-len(bits) // 8)
    if L >= row_nbytes:
        return b"".join(x.to_bytes(W // 8, "little") for x in words)[:row_nbytes]
    bits += [0] * (8 * L - len(bits))
    return bytes(sum(bits[8 * k + b] << b for b in range(8)) for k in range(L))


@settings(max_examples=60, deadline=None)
@given(W=st.sampled_from([32, 64]), n_words=st.sampled_from([1, 2, 3, 33, 64, 65, 130]),
       seed=st.integers(0, 2**32 - 1))
def test_encoder_bytes_match_a_literal_reading_of_the_format(W, n_words, seed):
    """Every payload byte, for rows mixing participating and exception words in any order."""
    rng = np.random.default_rng(seed)
    top = 2**W - 1
    # mostly narrow masks with a few wide ones, so rows stay compressed and mix exceptions in
    mask = np.array([(top >> int(s)) << int(s) for s in rng.integers(1, W, n_words)],
                    dtype=np.uint64)
    bitval = np.array([int(rng.integers(0, 2**63)) & int(m) for m in mask], dtype=np.uint64)
    dtype = torch.int32 if W == 32 else torch.int64
    n_rows = 24
    words = [[int(bitval[j]) | (int(rng.integers(0, 2**63)) & ~int(mask[j]) & top)
              for j in range(n_words)] for _ in range(n_rows)]
    for row in words:  # exceptions: about one word in five, anywhere
        for j in np.nonzero(rng.random(n_words) < 0.2)[0]:
            row[j] = int(rng.integers(0, 2**63)) & top
    x = torch.from_numpy(np.array(words, dtype=np.uint32 if W == 32 else np.uint64)
                         .view(np.int32 if W == 32 else np.int64))
    codec = IBPCodec(dtype=dtype, row_shape=(n_words,), word_bits=W, mask=mask, bitval=bitval)
    ct = codec.encode(x)
    payload, offsets = ct.payload.numpy().tobytes(), ct.offsets.tolist()
    for i, row in enumerate(words):
        expect = reference_encode_row(row, mask, bitval, W, n_words * W // 8)
        assert payload[offsets[i]:offsets[i + 1]] == expect, f"row {i}"
    assert as_bytes(codec.decode(ct)) == as_bytes(x)


def test_pdep_pext_match_bit_loop():
    rng = np.random.default_rng(7)
    masks = [0, 2**64 - 1, 0xAAAAAAAAAAAAAAAA, 0x5555555555555555, 0x8000000000000001, 0xFF00FF0]
    masks += [int(v) for v in rng.integers(0, 2**63, 50, dtype=np.int64)]
    for m in masks:
        x = int(rng.integers(0, 2**63, dtype=np.int64)) * 2 + 1
        positions = [b for b in range(64) if (m >> b) & 1]
        c = sum(((x >> b) & 1) << k for k, b in enumerate(positions))
        assert int(_pext(np.uint64(x), np.uint64(m))) == c
        assert int(_pdep(np.uint64(c), np.uint64(m))) == x & m


from numba import njit  # noqa: E402


@njit
def _pext(x, m):
    return bitstream.pext(x, m)


@njit
def _pdep(x, m):
    return bitstream.pdep(x, m)


def test_random_bits_cost_at_most_documented_overhead():
    """Incompressible rows are stored raw: payload + 4 bytes/row + 4 + at most 23 bytes."""
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.integers(0, 2**32, (5000, 128), dtype=np.uint32).view(np.float32))
    codec = IBPCodec.fit(x)
    ct = roundtrip(codec, x)
    assert ct.nbytes <= ct.raw_nbytes + 4 * (ct.n_rows + 1) + PAYLOAD_TAIL + 7
    assert (ct.row_lengths() == ct.row_nbytes).all()  # every row raw


def test_compressible_rows_shrink():
    rng = np.random.default_rng(4)
    x = torch.from_numpy(rng.normal(0, 0.05, (4000, 128)).astype(np.float32))
    ct = roundtrip(IBPCodec.fit(x), x)
    assert ct.fraction < 0.95


def test_fit_picks_smallest_over_the_sweep():
    rng = np.random.default_rng(5)
    x = torch.from_numpy(rng.normal(0, 0.05, (3000, 64)).astype(np.float32))
    best = IBPCodec.fit(x)
    for W in (32, 64):
        for t in (0.7, 0.8, 0.9, 0.95):
            other = IBPCodec.fit(x, word_bits=W, threshold=t)
            assert best.encode(x).payload.numel() <= other.encode(x).payload.numel() + 8


def test_fit_reads_only_the_sample(monkeypatch):
    x = torch.randn(20000, 16)
    seen = []
    real = ibp_fit.bit_counts

    def spy(rows, W):
        seen.append(rows.shape[0])
        return real(rows, W)

    monkeypatch.setattr(ibp_fit, "bit_counts", spy)
    codec = IBPCodec.fit(x, sample_rows=500)
    assert seen and all(n == 500 for n in seen)
    roundtrip(codec, x)
    # deterministic: the same seed gives the same state
    assert IBPCodec.fit(x, sample_rows=500).fingerprint == codec.fingerprint


def test_corrupted_offsets_refused_not_decoded():
    x = torch.randn(50, 10)
    codec = IBPCodec.fit(x)
    ct = codec.encode(x)
    bad = ct.offsets.clone()
    bad[10] = bad[11] + 1  # a negative length
    from dataclasses import replace

    with pytest.raises(CorruptPayloadError, match="row 9|row 10"):
        codec.decode(replace(ct, offsets=bad))
    with pytest.raises(CorruptPayloadError, match="payload has"):
        codec.decode(replace(ct, payload=ct.payload[: int(ct.offsets[-1])]))


def test_bad_fit_options_named():
    """IBP's own fit options (what both codecs refuse: tests/codec/test_row_codecs.py)."""
    x = torch.randn(10, 4)
    with pytest.raises(ValueError, match="word_bits=16"):
        IBPCodec.fit(x, word_bits=16)
    with pytest.raises(ValueError, match="threshold=1.5"):
        IBPCodec.fit(x, threshold=1.5)


def test_compressed_tensor_movement_and_sizes():
    x = torch.randn(64, 16)
    codec = IBPCodec.fit(x)
    ct = codec.encode(x)
    assert ct.nbytes == ct.payload.numel() + 4 * 65
    assert ct.raw_nbytes == x.numel() * 4
    shared = ct.share_memory_()
    assert shared.payload.is_shared() and shared.offsets.is_shared()
    moved = ct.to("cpu")
    assert as_bytes(codec.decode(moved)) == as_bytes(x)


def test_identity_codec_roundtrip_and_view():
    x = torch.randn(20, 3, 2).to(torch.bfloat16)
    codec = IdentityCodec.fit(x)
    ct = codec.encode(x)
    assert ct.offsets is None and ct.nbytes == ct.raw_nbytes
    assert as_bytes(codec.decode(ct)) == as_bytes(x)
    sub = ct.index_select(torch.tensor([4, 0, 19]))
    assert as_bytes(codec.decode(sub)) == as_bytes(x[[4, 0, 19]])
    assert IdentityCodec.from_state_dict(codec.state_dict()).fingerprint == codec.fingerprint


def test_identity_encode_returns_a_view_of_contiguous_rows():
    x = torch.arange(24, dtype=torch.float32).reshape(6, 4)
    ct = IdentityCodec.fit(x).encode(x)
    assert ct.payload.data_ptr() == x.data_ptr() and ct.payload.numel() == x.numel() * 4
    x[2, 1] = -1.0  # documented: the payload is the input's bytes
    assert IdentityCodec.fit(x).decode(ct)[2, 1].item() == -1.0
    with pytest.raises(ValueError, match="not contiguous"):  # no hidden copy either
        IdentityCodec.fit(x).encode(x.t().contiguous().t())
    b = torch.tensor([[True, False], [False, True]])
    assert torch.equal(IdentityCodec.fit(b).decode(IdentityCodec.fit(b).encode(b)), b)


def test_random_rows_distinct_sorted_deterministic():
    from ibp_graph.codec.base import random_rows

    x = torch.arange(1_000_000, dtype=torch.int64).reshape(-1, 1)
    a = random_rows(x, 5000, seed=3).reshape(-1)
    assert a.shape == (5000,)
    assert torch.all(a[1:] > a[:-1])  # distinct, in row order
    assert torch.equal(a, random_rows(x, 5000, seed=3).reshape(-1))
    assert not torch.equal(a, random_rows(x, 5000, seed=4).reshape(-1))
    # spread over the whole table, not a prefix
    assert a.min() < 100_000 and a.max() > 900_000
    small = x[:10]
    assert random_rows(small, 5000) is small
