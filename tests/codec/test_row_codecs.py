"""What IBPCodec and EBPCodec promise alike (both are ibp_graph.codec.rows.RowCodec): lossless
on rows they never saw, one kernel result serial or parallel, empty tensors, row gathers
without decoding, checked blobs and state, refusal of another codec's rows, bad input named.
What only one of them does is in tests/codec/test_ibp.py and test_ebp.py."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ibp_graph.codec import (
    CodecMismatchError,
    CompressedTensor,
    CorruptPayloadError,
    EBPCodec,
    IBPCodec,
    IdentityCodec,
    codec_from_state_dict,
)
from ibp_graph.layout import bitstream

from tests.codec.test_ibp import DTYPES, as_bytes, roundtrip, row_tensors

CODECS = [IBPCodec, EBPCodec]
#: fit options each codec's property tests draw from.
FIT_OPTIONS = {"ibp": st.fixed_dictionaries({"word_bits": st.sampled_from([32, 64])}),
               "ebp": st.fixed_dictionaries({"sparse": st.sampled_from([None, True])})}


def by_codec(*cases):
    """pytest parameters, one per codec, named after it: cases are codec classes or tuples
    whose first element is one."""
    return [pytest.param(*(c if isinstance(c, tuple) else (c,)),
                         id=(c[0] if isinstance(c, tuple) else c).name) for c in cases]


@pytest.mark.parametrize("codec_cls", by_codec(*CODECS))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_roundtrip_bit_exact_on_data_the_codec_never_saw(codec_cls, data, dtype):
    """A codec fitted on one group stays lossless on unrelated rows of the same shape."""
    options = data.draw(FIT_OPTIONS[codec_cls.name], label="fit options")
    fit_on = data.draw(row_tensors(dtype=dtype))
    other = data.draw(row_tensors(dtype=dtype))
    per = max(1, fit_on[0:1].numel())
    other = other.reshape((-1,) + tuple(fit_on.shape[1:])) if (
        other.numel() and fit_on[0:1].numel() and other.numel() % per == 0
    ) else torch.zeros((3,) + tuple(fit_on.shape[1:]), dtype=dtype)
    codec = codec_cls.fit(fit_on, **options)
    roundtrip(codec, other.contiguous())


@pytest.mark.parametrize("codec_cls,zero_tails", by_codec((IBPCodec, False), (EBPCodec, True)))
def test_parallel_and_serial_kernels_agree(monkeypatch, codec_cls, zero_tails):
    rng = np.random.default_rng(6)
    x = torch.from_numpy(rng.normal(0, 0.1, (9000, 37)).astype(np.float32))
    if zero_tails:  # every third row sparse
        x[::3, 5:] = 0
    codec = codec_cls.fit(x)
    monkeypatch.setattr(bitstream, "PARALLEL_MIN_ROWS", 1)
    par = codec.encode(x)
    monkeypatch.setattr(bitstream, "PARALLEL_MIN_ROWS", 10**9)
    ser = codec.encode(x)
    assert torch.equal(par.payload, ser.payload) and torch.equal(par.offsets, ser.offsets)
    assert as_bytes(codec.decode(par)) == as_bytes(x)


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0,), (0, 0), (3, 0, 2)])
@pytest.mark.parametrize("codec_cls", by_codec(*CODECS))
def test_empty_tensors_work(codec_cls, shape):
    x = torch.empty(shape)
    ct = roundtrip(codec_cls.fit(x), x)
    assert ct.n_rows == shape[0]


@pytest.mark.parametrize("codec_cls", by_codec(*CODECS))
def test_index_select_gathers_without_decoding(codec_cls):
    rng = np.random.default_rng(8)
    x = torch.from_numpy(rng.normal(0, 0.1, (500, 24)).astype(np.float32))
    x[::7] = torch.from_numpy(rng.integers(0, 2**32, (72, 24), dtype=np.uint32).view(np.float32))
    codec = codec_cls.fit(x)
    ct = codec.encode(x)
    rows = torch.tensor([3, 7, 7, 499, 0, 14, 250])
    sub = ct.index_select(rows)
    assert sub.shape == (7, 24)
    assert as_bytes(codec.decode(sub)) == as_bytes(x[rows])
    assert sub.nbytes < 7 * 24 * 4 + 4 * 8 + 64
    empty = ct.index_select(torch.empty(0, dtype=torch.int64))
    assert codec.decode(empty).shape == (0, 24)
    with pytest.raises(IndexError, match="rows contains 500"):
        ct.index_select(torch.tensor([1, 500]))
    with pytest.raises(IndexError, match="rows contains -1"):
        ct.index_select(torch.tensor([-1]))
    with pytest.raises(TypeError, match="rows must be a 1-d integer tensor"):
        ct.index_select(torch.tensor([1.0]))


@pytest.mark.parametrize("codec_cls", by_codec(*CODECS))
def test_serialized_roundtrip_and_corruption(codec_cls):
    x = torch.randn(100, 10)
    codec = codec_cls.fit(x)
    blob = codec.encode(x).to_bytes()
    assert as_bytes(codec.decode(CompressedTensor.from_bytes(blob))) == as_bytes(x)
    broken = bytearray(blob)
    broken[len(blob) // 2] ^= 0x10
    with pytest.raises(CorruptPayloadError, match="checksum"):
        CompressedTensor.from_bytes(bytes(broken))
    with pytest.raises(CorruptPayloadError, match="checksum|truncated"):
        CompressedTensor.from_bytes(blob[:-7])
    with pytest.raises(CorruptPayloadError, match="truncated"):
        CompressedTensor.from_bytes(blob[:5])
    with pytest.raises(CorruptPayloadError, match="expected b'IBPG'"):
        CompressedTensor.from_bytes(b"XXXX" + blob[4:])
    newer = bytearray(blob)
    newer[4] = 99
    with pytest.raises(CorruptPayloadError, match="format version 99"):
        CompressedTensor.from_bytes(bytes(newer))


@pytest.mark.parametrize("codec_cls,zero_rows,state_size_ok", by_codec(
    (IBPCodec, False, lambda c: c.state_nbytes == 2 * c.n_words * c.word_bits // 8),
    (EBPCodec, True, lambda c: 0 < c.state_nbytes < 100_000)))
def test_state_dict_and_blob_roundtrip(codec_cls, zero_rows, state_size_ok):
    x = torch.randn(300, 12, dtype=torch.float64)
    if zero_rows:
        x[::2] = 0
    codec = codec_cls.fit(x)
    ct = codec.encode(x)
    for again in (codec_cls.from_state_dict(codec.state_dict()), codec_cls.from_bytes(codec.to_bytes()),
                  codec_from_state_dict(codec.state_dict())):
        assert isinstance(again, codec_cls) and again.fingerprint == codec.fingerprint
        assert as_bytes(again.decode(ct)) == as_bytes(x)
    fresh = codec_cls.fit(torch.randn(10, 12, dtype=torch.float64) * 1e6)
    fresh.load_state_dict(codec.state_dict())
    assert as_bytes(fresh.decode(ct)) == as_bytes(x)
    assert state_size_ok(codec)
    old = codec.state_dict()
    old["format_version"] = 0
    with pytest.raises(CorruptPayloadError, match="format_version=0"):
        codec_cls.from_state_dict(old)
    with pytest.raises(CorruptPayloadError, match="codec 'identity'"):
        codec_cls.from_state_dict(IdentityCodec.fit(x).state_dict())


@pytest.mark.parametrize("codec_cls,other_cls", by_codec((IBPCodec, IdentityCodec), (EBPCodec, IBPCodec)))
def test_mismatched_codec_refused(codec_cls, other_cls):
    x = torch.randn(100, 8)
    a = codec_cls.fit(x)
    b = codec_cls.fit(x * 1000)
    ct = a.encode(x)
    assert a.fingerprint != b.fingerprint
    with pytest.raises(CodecMismatchError, match="fingerprint"):
        b.decode(ct)
    with pytest.raises(CodecMismatchError, match=f"'{codec_cls.name}'"):
        other_cls.fit(x).decode(ct)


@pytest.mark.parametrize("codec_cls", by_codec(*CODECS))
def test_bad_input_names_argument_value_and_accepted(codec_cls):
    """What both codecs refuse; each codec's own options: test_ibp.py and test_ebp.py."""
    x = torch.randn(10, 4)
    with pytest.raises(TypeError, match=r"dtype=torch.complex64 is not supported; accepted: float32"):
        codec_cls.fit(torch.zeros(3, 2, dtype=torch.complex64))
    with pytest.raises(ValueError, match="0-d"):
        codec_cls.fit(torch.tensor(1.0))
    with pytest.raises(ValueError, match="not contiguous"):
        codec_cls.fit(torch.randn(4, 6).t())
    with pytest.raises(ValueError, match="sample_rows=0"):
        codec_cls.fit(x, sample_rows=0)
    codec = codec_cls.fit(x)
    with pytest.raises(ValueError, match="not contiguous"):
        codec.encode(torch.randn(4, 10).t())
    with pytest.raises(TypeError, match="dtype=torch.float64; this codec was fitted on torch.float32"):
        codec.encode(x.double())
    with pytest.raises(ValueError, match=r"rows have shape \(5,\); .* \(4,\)"):
        codec.encode(torch.randn(3, 5))
    ct = codec.encode(x)
    with pytest.raises(TypeError, match="out has dtype=torch.float64"):
        codec.decode(ct, out=torch.empty(10, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"out has shape \(10, 5\)"):
        codec.decode(ct, out=torch.empty(10, 5))
    out = torch.empty(10, 4)
    assert codec.decode(ct, out=out) is out and torch.equal(out, x)


@pytest.mark.parametrize("codec_cls", by_codec(*CODECS, IdentityCodec))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_decode_into_out_rows_scatters_the_rows_bit_exactly(codec_cls, data, dtype):
    """decode(ct, out=buf, out_rows=r) puts row i at buf[r[i]] (the rows decode() gives, bit for bit) and
    leaves every other row of buf as it was: serial and parallel kernels, raw, dense and sparse rows."""
    x = data.draw(row_tensors(dtype=dtype)).contiguous()
    options = {} if codec_cls is IdentityCodec else data.draw(FIT_OPTIONS[codec_cls.name], label="fit options")
    codec = codec_cls.fit(x, **options)
    ct = codec.encode(x)
    extra = data.draw(st.integers(0, 5), label="rows of out beyond x's")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    n_out = x.shape[0] + extra
    out_rows = torch.from_numpy(rng.permutation(n_out)[: x.shape[0]])
    shape = (n_out,) + tuple(x.shape[1:])
    before = torch.empty(shape, dtype=dtype)  # random bits: NaNs, subnormals, -0.0 among them
    before.view(-1).view(torch.uint8)[:] = torch.from_numpy(rng.integers(0, 256, before.numel() * x.element_size(),
                                                                         dtype=np.uint8))
    out = before.clone()
    got = codec.decode(ct, out=out, out_rows=out_rows)
    assert got is out
    want = before.clone()
    want[out_rows] = x
    assert as_bytes(out) == as_bytes(want)


@pytest.mark.parametrize("codec_cls", by_codec(*CODECS, IdentityCodec))
def test_decode_into_out_rows_of_many_rows_takes_the_parallel_kernels(monkeypatch, codec_cls):
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.normal(0, 0.1, (9000, 37)).astype(np.float32))
    x[::3, 5:] = 0  # sparse rows for EBP
    x.view(torch.int32)[::7, 2] = 0x7fc00123  # NaN payloads
    codec = codec_cls.fit(x)
    ct = codec.encode(x)
    out_rows = torch.from_numpy(rng.permutation(12000)[:9000])
    for min_rows in (1, 10**9):
        monkeypatch.setattr(bitstream, "PARALLEL_MIN_ROWS", min_rows)
        out = torch.full((12000, 37), -0.0)
        codec.decode(ct, out=out, out_rows=out_rows)
        assert as_bytes(out[out_rows]) == as_bytes(x)
        rest = np.setdiff1d(np.arange(12000), out_rows.numpy())
        assert as_bytes(out[torch.from_numpy(rest)]) == as_bytes(torch.full((rest.size, 37), -0.0))


@pytest.mark.parametrize("codec_cls", by_codec(*CODECS, IdentityCodec))
def test_bad_out_rows_are_named(codec_cls):
    x = torch.randn(6, 4)
    codec = codec_cls.fit(x)
    ct = codec.encode(x)
    out = torch.zeros(8, 4)
    with pytest.raises(ValueError, match=r"out_rows needs out=, a tensor of rows of shape \(4,\)"):
        codec.decode(ct, out_rows=torch.arange(6))
    with pytest.raises(ValueError, match=r"out_rows has 5 entries; accepted: one per decoded row \(6\)"):
        codec.decode(ct, out=out, out_rows=torch.arange(5))
    with pytest.raises(IndexError, match=r"out_rows contains 8, outside the valid range \[0, 8\)"):
        codec.decode(ct, out=out, out_rows=torch.tensor([0, 1, 2, 3, 4, 8]))
    with pytest.raises(ValueError, match="out_rows names a row of out more than once"):
        codec.decode(ct, out=out, out_rows=torch.tensor([0, 1, 2, 3, 4, 4]))
    with pytest.raises(TypeError, match="out_rows must be a 1-d integer tensor"):
        codec.decode(ct, out=out, out_rows=torch.arange(6.0))
    with pytest.raises(ValueError, match=r"out has shape \(8, 5\); accepted: \(8, 4\)"):
        codec.decode(ct, out=torch.zeros(8, 5), out_rows=torch.arange(6))
    assert torch.equal(out, torch.zeros(8, 4))  # nothing was written by a refused call
