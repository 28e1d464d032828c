"""EBPCodec: bit-exact round trips (property-based), the row format against a reference
encoder written from docs/format.md, sizes on the synthetic families, state, bad input."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ibp_graph.codec import (
    CompressedTensor,
    CorruptPayloadError,
    EBPCodec,
    IBPCodec,
    IdentityCodec,
)
from ibp_graph.codec.ebp.codes import ESC, LUT_BITS, MAX_DICT, build_code_tables
from ibp_graph.codec.ebp.decode import decode_rows
from ibp_graph.codec.ebp.huffman import huffman_lengths
from ibp_graph.layout.dtypes import as_row_bytes
from ibp_graph.layout.rows import PAYLOAD_TAIL

from tests.codec.test_ibp import DTYPES, as_bytes, roundtrip, row_tensors, special_value_rows

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


# --------------------------------------------------------------------------- reference encoder
def canonical_codes(lens: np.ndarray, has_esc: bool) -> list[tuple[int, int, int]]:
    """(dictionary index, code, length) of each symbol: canonical prefix code, MSB-first codes.

    Symbols are the dictionary indices 0..len(lens)-1 (lens[k] their lengths) and, with
    has_esc, the escape (index 255) whose length is lens[-1]. Order: by length, then index.
    """
    n_dict = len(lens) - (1 if has_esc else 0)
    syms = [(int(lens[k]), k) for k in range(n_dict)]
    if has_esc:
        syms.append((int(lens[-1]), ESC))
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


class BitWriter:
    """LSB-first bit stream, as docs/format.md numbers bits."""

    def __init__(self):
        self.bits: list[int] = []

    def put(self, v: int, n: int) -> None:
        assert 0 <= v < (1 << n) or n == 0 and v == 0
        self.bits += [(v >> k) & 1 for k in range(n)]

    def gamma(self, v: int) -> None:
        b = v.bit_length()
        self.put(0, b - 1)
        self.put(1, 1)
        self.put(v & ((1 << (b - 1)) - 1), b - 1)

    def to_bytes(self) -> bytes:
        out = bytearray((len(self.bits) + 7) // 8)
        for p, bit in enumerate(self.bits):
            out[p >> 3] |= bit << (p & 7)
        return bytes(out)


def reference_rows(codec: EBPCodec, x: torch.Tensor) -> list[bytes]:
    """Every row encoded by the rules of docs/format.md, in plain Python (slow, literal)."""
    t = codec.tables
    W, d = t.W, t.d
    n = x.shape[0]
    raw_rows = np.frombuffer(as_bytes(x), dtype=np.uint8).reshape(n, -1) if d and n else None
    vals = raw_rows.view(_UINT[W // 8]) if raw_rows is not None else None
    codes = {}
    for tid in range(t.n_tables):
        lens = [int(t.t_len[tid, k]) for k in range(int(t.t_size[tid]))]
        if t.t_esc[tid]:
            lens.append(int(t.t_len[tid, 255]))
        codes[tid] = {idx: (code, ln) for idx, code, ln in canonical_codes(np.array(lens),
                                                                            bool(t.t_esc[tid]))}

    def code_of(tid, hi):
        dvals = [int(v) for v in t.t_dict[tid, :int(t.t_size[tid])]]
        if hi in dvals:
            return codes[tid][dvals.index(hi)], False
        assert t.t_esc[tid], "a value outside a table without escape"
        return codes[tid][255], True

    def high_codes(elements):
        """(table, value, low bits) of each element -> the codes of the values' high parts, and
        the high parts that escape, in order."""
        codes, escaped = [], []
        for tid, v, lw in elements:
            hi = v >> lw if lw < 64 else 0
            c, e = code_of(tid, hi)
            codes.append(c)
            if e:
                escaped.append(hi)
        return codes, escaped

    def put_code(bw, code_len):
        code, ln = code_len
        for k in range(ln - 1, -1, -1):  # MSB of the canonical code first
            bw.put((code >> k) & 1, 1)

    out = []
    for i in range(n):
        xs = [int(v) for v in vals[i]] if d else []
        # dense
        bw = BitWriter()
        if t.sparse:
            bw.put(0, 1)
        for j in range(d):
            lw = int(t.col_lw[j])
            bw.put(xs[j] & ((1 << lw) - 1), lw)
        cds, escs = high_codes((int(t.col_tid[j]), xs[j], int(t.col_lw[j])) for j in range(d))
        bw.gamma(len(escs) + 1)
        for hi in escs:
            bw.put(hi, t.HE)
        for c in cds:
            put_code(bw, c)
        best = bw
        if t.sparse:
            sw = BitWriter()
            sw.put(1, 1)
            nz = [j for j in range(d) if xs[j] != int(t.col_default[j])]
            LS, HS = t.LS, W - t.LS
            scodes, sesc = high_codes((int(t.col_tids[j]), xs[j], LS) for j in nz)
            sw.gamma(len(nz) + 1)
            sw.gamma(len(sesc) + 1)
            for j in nz:
                sw.put(j, t.IB)
            for j in nz:
                sw.put(xs[j] & ((1 << LS) - 1), LS)
            for hi in sesc:
                sw.put(hi, HS)
            for c in scodes:
                put_code(sw, c)
            if len(sw.bits) < len(bw.bits):
                best = sw
        b = best.to_bytes()
        out.append(b if len(b) < t.row_nbytes else bytes(raw_rows[i]) if d else b"")
    return out


def payload_rows(ct: CompressedTensor) -> list[bytes]:
    o = ct.offsets.tolist()
    p = ct.payload.numpy().tobytes()
    return [p[o[k]:o[k + 1]] for k in range(ct.n_rows)]


# --------------------------------------------------------------------------- crafted codecs
def crafted_codec(rng: np.random.Generator, dtype: torch.dtype, row_shape: tuple,
                  sparse: bool) -> EBPCodec:
    """A codec with chosen (not fitted) tables: any split, tiny or full dictionaries, tables
    with and without escape, codes as long as allowed, shared tables, odd defaults."""
    W = 8 * torch.empty((), dtype=dtype).element_size()
    d = math.prod(row_shape)
    tables = []

    def table(hw):
        if hw == 0:
            return (0, [0], [0], False)
        if hw <= 3 and rng.random() < 0.5:  # the whole range: no escape
            vals = list(range(1 << hw))
            esc = False
        else:
            cap = min(MAX_DICT, (1 << min(hw, 20)) - 1)
            n = int(rng.integers(1, min(cap, 40) + 1))
            vals = sorted({int(rng.integers(0, 1 << min(hw, 62))) for _ in range(n)})
            rng.shuffle(vals)
            esc = True
        leaves = len(vals) + esc
        w = rng.integers(1, 1000, leaves) ** (1 + 2 * rng.random())
        lens = list(huffman_lengths(np.asarray(w, dtype=np.int64), LUT_BITS)) if leaves > 1 \
            else [0]
        return (hw, vals, lens, esc)

    col_tid = []
    for _ in range(d):
        if tables and rng.random() < 0.3:
            col_tid.append(int(rng.integers(0, len(tables))))
            continue
        hw = int(rng.choice([0, 1, 2, 3, W // 2, W - 1, W, int(rng.integers(0, W + 1))]))
        tables.append(table(hw))
        col_tid.append(len(tables) - 1)
    LS = int(rng.integers(0, W + 1))
    col_tids = []
    if sparse:
        first = len(tables)
        for _ in range(int(rng.integers(1, 4))):
            tables.append(table(W - LS))
        col_tids = [int(rng.integers(first, len(tables))) for _ in range(d)]
    defaults = [int(rng.integers(0, 1 << min(W, 63))) if rng.random() < 0.3 else 0 for _ in range(d)]
    T = max(len(tables), 1)
    t_hw = np.zeros(T, np.int64)
    t_size = np.ones(T, np.int64)
    t_esc = np.zeros(T, np.int64)
    t_dict = np.zeros((T, 256), np.uint64)
    t_len = np.zeros((T, 256), np.int64)
    for k, (hw, vals, lens, esc) in enumerate(tables):
        t_hw[k], t_size[k], t_esc[k] = hw, len(vals), int(esc)
        t_dict[k, :len(vals)] = vals
        t_len[k, :len(vals)] = lens[:len(vals)]
        if esc:
            t_len[k, 255] = lens[-1]
    return EBPCodec(dtype=dtype, row_shape=row_shape, col_tid=np.array(col_tid, np.int64),
                    col_tids=np.array(col_tids if sparse else [0] * d, np.int64),
                    col_default=np.array(defaults, np.uint64), t_hw=t_hw, t_size=t_size,
                    t_esc=t_esc, t_dict=t_dict, t_len=t_len, sparse=sparse,
                    sparse_low_bits=LS if sparse else 0)


def rows_for(codec: EBPCodec, rng: np.random.Generator, n: int) -> torch.Tensor:
    """Rows built from the codec's own dictionaries and defaults (short codes), with escapes,
    random elements and fully random rows mixed in."""
    t = codec.tables
    W, d = t.W, t.d
    words = np.zeros((n, d), dtype=np.uint64)
    for i in range(n):
        kind = rng.random()
        for j in range(d):
            lw = int(t.col_lw[j])
            tid = int(t.col_tid[j])
            r = rng.random()
            lo = int(rng.integers(0, 1 << min(lw, 63))) | (int(rng.integers(0, 2)) << 63 if lw == 64 else 0)
            if kind < 0.1:  # random row
                v = int(rng.integers(0, 1 << min(W, 63))) | ((int(rng.integers(0, 2)) << 63) if W == 64 else 0)
            elif t.sparse and kind < 0.5 and r < 0.8:
                v = int(t.col_default[j])
            elif r < 0.85:
                hi = int(rng.choice(t.t_dict[tid, :int(t.t_size[tid])]))
                v = ((hi << lw) if lw < 64 else 0) | lo
            else:
                v = int(rng.integers(0, 1 << min(W, 63)))
            words[i, j] = v & ((1 << W) - 1)
    raw = words.astype(_UINT[W // 8]).view(np.uint8).reshape(n, -1)
    buf = torch.from_numpy(np.ascontiguousarray(raw)).reshape(-1)
    if codec.dtype == torch.bool:
        return (buf & 1).view(torch.bool).reshape((n,) + codec.row_shape)
    return buf.view(codec.dtype).reshape((n,) + codec.row_shape)


# --------------------------------------------------------------------------- round trips
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=row_tensors(), sparse=st.sampled_from([None, True, False]))
def test_roundtrip_bit_exact_fitted_on_same_data(x, sparse):
    codec = EBPCodec.fit(x, sparse=sparse)
    roundtrip(codec, x)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from(DTYPES),
       shape=st.sampled_from([(1,), (2,), (3,), (7,), (8,), (9,), (33,), (2, 5), (70,)]),
       sparse=st.booleans())
def test_crafted_tables_match_the_reference_encoder(seed, dtype, shape, sparse):
    """Any legal state (splits 0..W bits, dictionaries with and without escape, codes up to
    8 bits, shared tables, odd defaults): bytes equal the spec's, and decode is exact."""
    rng = np.random.default_rng(seed)
    codec = crafted_codec(rng, dtype, shape, sparse)
    x = rows_for(codec, rng, 12)
    ct = codec.encode(x)
    assert payload_rows(ct) == reference_rows(codec, x), f"seed={seed}"
    assert as_bytes(codec.decode(ct)) == as_bytes(x)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=row_tensors(), sparse=st.sampled_from([None, True]))
def test_fitted_codec_matches_the_reference_encoder(x, sparse):
    codec = EBPCodec.fit(x, sparse=sparse)
    ct = codec.encode(x)
    assert payload_rows(ct) == reference_rows(codec, x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sparse", [False, True])
def test_every_dtype_all_special_values(dtype, sparse):
    x = special_value_rows(dtype, starts=(0, 100))
    x[::3] = 0  # some rows of defaults
    roundtrip(EBPCodec.fit(x, sparse=sparse), x)
    # and specials the codec never saw
    codec = EBPCodec.fit(x[20:], sparse=sparse)
    roundtrip(codec, x[:20].contiguous())


def test_sparse_rows_use_the_sparse_mode_and_dense_rows_do_not():
    rng = np.random.default_rng(2)
    x = torch.zeros(400, 300)
    for i in range(400):
        cols = rng.choice(300, 5, replace=False)
        x[i, torch.from_numpy(cols)] = torch.from_numpy(rng.random(5).astype(np.float32))
    x[:40] = torch.from_numpy(rng.normal(0, 1, (40, 300)).astype(np.float32))  # dense rows
    codec = EBPCodec.fit(x)
    assert codec.sparse
    ct = roundtrip(codec, x)
    rows = payload_rows(ct)
    assert all(r[0] & 1 == 1 for r in rows[40:])  # sparse mode bit
    assert all(len(r) == 1200 or r[0] & 1 == 0 for r in rows[:40])
    assert ct.fraction < 0.05


# --------------------------------------------------------------------------- the format
def test_format_worked_example():
    """Two rows worked by hand from docs/format.md (EBP row format)."""
    t_dict = np.zeros((1, 256), np.uint64)
    t_dict[0, :2] = [7, 9]
    t_len = np.zeros((1, 256), np.int64)
    t_len[0, :2] = [1, 2]
    t_len[0, 255] = 2
    codec = EBPCodec(dtype=torch.uint8, row_shape=(4,), col_tid=np.zeros(4, np.int64),
                     col_tids=np.zeros(4, np.int64), col_default=np.zeros(4, np.uint64),
                     t_hw=np.array([8]), t_size=np.array([2]), t_esc=np.array([1]),
                     t_dict=t_dict, t_len=t_len, sparse=False, sparse_low_bits=0)
    # canonical codes: 7 -> 0, 9 -> 10, escape -> 11 (MSB first)
    assert canonical_codes(np.array([1, 2, 2]), True) == [(0, 0b0, 1), (1, 0b10, 2), (255, 0b11, 2)]
    x = torch.tensor([[7, 7, 9, 7], [7, 200, 9, 7]], dtype=torch.uint8)
    ct = codec.encode(x)
    # row 0: gamma(0 escapes + 1) = "1"; codes 0, 0, (1,0), 0 -> bits 1 0 0 1 0 0 -> 0x09
    # row 1: gamma(2) = "010"; escape 200 in HE = 8 bits; codes 0, (1,1), (1,0), 0
    #        -> 17 bits: 0x42 0x76 0x00
    assert payload_rows(ct) == [bytes([0x09]), bytes([0x42, 0x76, 0x00])]
    assert ct.offsets.tolist() == [0, 1, 4]
    assert ct.payload.numel() % 8 == 0 and ct.payload.numel() >= 4 + PAYLOAD_TAIL
    assert as_bytes(codec.decode(ct)) == as_bytes(x)


def test_canonical_codes_and_lookup_tables_agree():
    rng = np.random.default_rng(3)
    for _ in range(30):
        m = int(rng.integers(2, 40))
        lens = huffman_lengths(rng.integers(1, 10**6, m).astype(np.int64), LUT_BITS)
        assert lens.max() <= LUT_BITS and abs(sum(2.0 ** -lens) - 1.0) < 1e-12  # complete
        codes = canonical_codes(lens, True)
        words = ["".join(str((c >> k) & 1) for k in range(ln - 1, -1, -1)) for _, c, ln in codes]
        assert all(not b.startswith(a) for a in words for b in words if a is not b)  # prefix-free
        t_len = np.zeros((1, 256), np.int64)
        t_len[0, :m - 1] = lens[:m - 1]
        t_len[0, 255] = lens[-1]
        t_dict = np.zeros((1, 256), np.uint64)
        t_dict[0, :m - 1] = np.arange(m - 1) * 3
        got_codes, dlut, *_ = build_code_tables(np.array([m - 1]), np.array([1]), t_len,
                                                       t_dict, np.array([4096]), np.array([0]))
        for idx, code, ln in codes:
            rev = int("".join(reversed(format(code, f"0{ln}b"))), 2)
            assert got_codes[0, idx] == rev
            for f in range(1 << (LUT_BITS - ln)):
                assert dlut[0, rev | (f << ln)] == idx | (ln << 8)


def test_huffman_lengths_optimal_when_unconstrained():
    import heapq

    rng = np.random.default_rng(4)
    for _ in range(40):
        w = rng.integers(1, 1000, int(rng.integers(2, 30))).astype(np.int64)
        heap = list(w)
        heapq.heapify(heap)
        cost = 0
        while len(heap) > 1:
            a, b = heapq.heappop(heap), heapq.heappop(heap)
            cost += a + b
            heapq.heappush(heap, a + b)
        lens = huffman_lengths(w, 60)
        assert int((w * lens).sum()) == cost
    assert list(huffman_lengths(np.array([5]), 8)) == [0]
    # a geometric distribution needs the length limit
    w = (2 ** np.arange(20)).astype(np.int64)
    lens = huffman_lengths(w, 8)
    assert lens.max() == 8 and abs(sum(2.0 ** -lens) - 1.0) < 1e-12


# --------------------------------------------------------------------------- sizes
FAMILY_TARGETS = {  # fraction of raw on the synthetic families (issue 7), with IBP for reference
    "embedding_f32": 0.84, "embedding_f16": 0.85, "pca_bow": 0.88, "binary_bow": 0.010,
}


@pytest.mark.parametrize("family", ["embedding_f32", "embedding_f16", "pca_bow", "tfidf",
                                    "binary_bow", "node_ids_i64", "random_bits"])
def test_families_beat_ibp(family):
    from ibp_graph.data.synthetic import make_family

    x = make_family(family, 4096)
    ebp = roundtrip(EBPCodec.fit(x), x).fraction
    ibp = IBPCodec.fit(x).encode(x).fraction
    if family == "random_bits":
        assert ebp <= ibp + 1e-9  # both store the rows raw
        return
    assert ebp < ibp
    if family in FAMILY_TARGETS:
        assert ebp <= FAMILY_TARGETS[family], f"{family}: {ebp:.4f}"


def test_random_bits_cost_at_most_documented_overhead():
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.integers(0, 2**32, (3000, 128), dtype=np.uint32).view(np.float32))
    ct = roundtrip(EBPCodec.fit(x), x)
    assert ct.nbytes <= ct.raw_nbytes + 4 * (ct.n_rows + 1) + PAYLOAD_TAIL + 7
    assert (ct.row_lengths() == ct.row_nbytes).float().mean() > 0.95  # nearly every row raw


# --------------------------------------------------------------------------- fit
def test_fit_reads_only_the_sample_and_is_deterministic():
    x = torch.randn(20000, 16)
    a = EBPCodec.fit(x, sample_rows=500)
    assert a.fingerprint == EBPCodec.fit(x, sample_rows=500).fingerprint
    assert a.fingerprint != EBPCodec.fit(x, sample_rows=500, seed=1).fingerprint
    roundtrip(a, x)


# --------------------------------------------------------------------------- corruption
def test_corrupted_rows_raise_or_decode_never_crash():
    """Flipped bits anywhere in the payload: decoding raises CorruptPayloadError or returns
    rows (possibly wrong: the format has no checksum per row); it never reads out of bounds."""
    rng = np.random.default_rng(9)
    x = torch.from_numpy(rng.normal(0, 0.1, (200, 40)).astype(np.float32))
    x[::2, 3:] = 0
    codec = EBPCodec.fit(x)
    ct = codec.encode(x)
    raised = 0
    for _ in range(200):
        payload = ct.payload.clone()
        for _ in range(int(rng.integers(1, 4))):
            k = int(rng.integers(0, int(ct.offsets[-1])))
            payload[k] ^= 1 << int(rng.integers(0, 8))
        try:
            codec.decode(dataclasses.replace(ct, payload=payload))
        except CorruptPayloadError as e:
            assert "row" in str(e)
            raised += 1
    assert raised > 50  # most flips change a stream's length or its escapes


def test_detectable_corruptions_are_detected():
    rng = np.random.default_rng(10)
    x = torch.from_numpy(rng.normal(0, 0.1, (64, 64)).astype(np.float32))
    codec = EBPCodec.fit(x, sparse=False)
    ct = codec.encode(x)
    lengths = ct.row_lengths().numpy()
    r = int(np.flatnonzero(lengths < codec.row_nbytes)[0])
    # a truncated row (one byte fewer) no longer ends in its last byte
    offs = ct.offsets.clone()
    offs[r + 1:] -= 1
    payload = torch.cat([ct.payload[:int(ct.offsets[r + 1]) - 1], ct.payload[int(ct.offsets[r + 1]):]])
    with pytest.raises(CorruptPayloadError, match=f"row {r}"):
        codec.decode(dataclasses.replace(ct, offsets=offs, payload=payload))
    # offsets running backwards or past the payload
    bad = ct.offsets.clone()
    bad[10] = bad[11] + 1
    with pytest.raises(CorruptPayloadError, match="row 9|row 10"):
        codec.decode(dataclasses.replace(ct, offsets=bad))
    with pytest.raises(CorruptPayloadError, match="payload has"):
        codec.decode(dataclasses.replace(ct, payload=ct.payload[: int(ct.offsets[-1])]))


@pytest.mark.parametrize("sparse", [False, True])
def test_a_corrupt_row_is_reported_alone_and_its_neighbours_decode(sparse):
    """Dense rows decode four at a time in lockstep; a corrupt row at any place of such a
    group, or next to a sparse or raw row, is the only one reported, and every other row
    still decodes to its exact bits."""
    rng = np.random.default_rng(11)
    x = torch.from_numpy(rng.normal(0, 0.1, (41, 64)).astype(np.float32))
    if sparse:
        x[::3, 4:] = 0  # every third row sparse
    x[7] = torch.from_numpy(rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
                            .view(np.float32))  # a raw row
    codec = EBPCodec.fit(x, sparse=sparse)
    ct = codec.encode(x)
    t = codec.tables
    lengths = ct.row_lengths().numpy()
    for r in (4, 5, 6, 8, 40):  # even and odd places, beside the raw row, the last (lone) row
        assert lengths[r] < codec.row_nbytes
        payload = ct.payload.clone()
        payload[int(ct.offsets[r]):int(ct.offsets[r + 1])] = 0  # a dense row, escape count 0 bits
        out = np.zeros((x.shape[0], t.row_nbytes), dtype=np.uint8)
        words = out.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[t.W // 8])
        bad = decode_rows(payload.numpy(), ct.offsets.numpy(), words.reshape(x.shape[0], -1),
                            out, t)
        assert bad.tolist() == [r], f"row {r}"
        good = np.ones(x.shape[0], dtype=bool)
        good[r] = False
        assert np.array_equal(out[good], as_row_bytes(x)[good]), f"row {r}"


# --------------------------------------------------------------------------- state
@pytest.mark.parametrize("edit,match", [
    (lambda s: s.__setitem__("t_len", s["t_len"] * 0 + 1), "prefix code"),
    (lambda s: s.__setitem__("col_tid", s["col_tid"] + 10**6), "col_tid"),
    (lambda s: s.__setitem__("t_hw", s["t_hw"] * 0 + 99), "t_hw"),
    (lambda s: s.pop("t_dict"), "t_dict"),
    (lambda s: s.__setitem__("t_size", s["t_size"] * 0), "t_size"),
])
def test_malformed_state_refused(edit, match):
    x = torch.randn(200, 6)
    state = EBPCodec.fit(x).state_dict()
    state = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in state.items()}
    edit(state)
    with pytest.raises(CorruptPayloadError, match=match):
        EBPCodec.from_state_dict(state)


def test_bad_fit_options_named():
    """EBP's own fit options (what both codecs refuse: tests/codec/test_row_codecs.py)."""
    with pytest.raises(ValueError, match="sparse='yes'"):
        EBPCodec.fit(torch.randn(10, 4), sparse="yes")


# --------------------------------------------------------------------------- fit_codec
def test_fit_codec_picks_the_smallest_and_identity_when_nothing_gains():
    import ibp_graph
    from ibp_graph.codec import fit_codec
    from ibp_graph.codec.auto import rank_codecs
    from ibp_graph.data.synthetic import make_family

    assert ibp_graph.fit_codec is fit_codec
    emb = make_family("embedding_f16", 4000)
    ranked = rank_codecs(emb)
    assert [c.name for c in ranked] == ["ebp", "ibp"] and ranked[0].fraction < ranked[1].fraction
    assert isinstance(fit_codec(emb), EBPCodec)
    roundtrip(fit_codec(emb), emb)
    noise = torch.from_numpy(np.random.default_rng(0).integers(0, 2**32, (2000, 64),
                                                              dtype=np.uint32).view(np.float32))
    assert isinstance(fit_codec(noise), IdentityCodec)
    assert isinstance(fit_codec(torch.zeros(10, 4)), IdentityCodec)  # tiny: headers outweigh gains
    assert isinstance(fit_codec(emb, "ibp"), IBPCodec)
    assert isinstance(fit_codec(noise, "ebp"), EBPCodec)
    # a decode speed no codec reaches leaves the identity codec
    assert isinstance(fit_codec(emb, device="cpu", min_decode_gbps=1e6), IdentityCodec)
    with pytest.raises(ValueError, match="kind='zstd'"):
        fit_codec(emb, "zstd")
    with pytest.raises(ValueError, match="min_decode_gbps=-1"):
        fit_codec(emb, min_decode_gbps=-1)


# Fits a 4 x 100_000 float32 table (1.6 MB) with EBP, directly or through fit_codec, in a process
# told it has `argv[2]` bytes of memory; prints the error (or "fitted") and the peak RSS growth.
_WIDE_FIT = """
import resource, sys
import numpy as np, torch
from ibp_graph.codec.auto import fit_codec
from ibp_graph.codec.ebp import fit
fit.available_memory = lambda: int(sys.argv[2])
x = torch.from_numpy(np.random.default_rng(0).standard_normal((4, 100_000)).astype(np.float32))
fit_codec(x[:, :64].contiguous(), sys.argv[1])  # compiled and warm before measuring
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    fit_codec(x, sys.argv[1])
    print("fitted")
except MemoryError as e:
    print(e)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


@pytest.mark.parametrize("kind", ["ebp", "auto"])
def test_a_fit_on_very_wide_rows_refuses_before_it_exceeds_memory(kind):
    """Issue 19: ~22 KB of tables per distinct column (4.2 GB for a 1.5 MB table of 4 x 100k, an
    OOM kill at 10^6 columns); the fit now names the bytes it needs and the memory available."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _WIDE_FIT, kind, str(256 << 20)], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[0].startswith("EBP fit (dense) of rows of 100,000 columns") and \
        "bytes of memory are available; use the ibp or identity codec" in out[0], out
    need = int(out[0].split("needs about ")[1].split(" bytes")[0].replace(",", ""))
    assert need > 256 << 20 and f"{256 << 20:,} bytes of memory are available" in out[0]
    assert int(out[1]) < 200 << 20  # refused before the tables: the peak grew by far less than `need`
