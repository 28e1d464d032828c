"""Payloads, fits and states the codecs refuse by name (each was once accepted or failed unclearly):

1. a CompressedTensor whose payload is not a contiguous 1-d uint8 tensor (a strided view) was decoded and
   gathered from the wrong bytes (the kernels address the payload as contiguous): raw rows came back as
   other bytes, silently. The GPU path already refused it (gpu.dispatch.check_compressed); the CPU path
   now does too, with the same words.
2. fit_codec / rank_codecs did not check sample_rows: -1 raised numpy's "negative dimensions are not
   allowed", 0 fitted a codec on no rows at all (IBPCodec.fit(sample_rows=0) itself refuses it).
3. damaged state dicts: a negative row_shape built a codec, IdentityCodec.from_state_dict raised a bare
   KeyError, IBP leaked numpy's messages, EBP leaked OverflowError, a tensor-valued format_version
   leaked torch's RuntimeError; each is now a CorruptPayloadError naming the key.
4. IBPCodec kept the caller's mask/bitval arrays (from_state_dict: the state dict's own tensors): writing
   to them afterwards changed the row lengths encode computes but not the tables it writes with, and
   encode produced a payload its own decode refuses (rows overrunning their offsets).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from ibp_graph.codec import (
    CorruptPayloadError,
    EBPCodec,
    IBPCodec,
    IdentityCodec,
    codec_from_state_dict,
    fit_codec,
)
from ibp_graph.codec.auto import rank_codecs

from tests.codec.test_ibp import as_bytes

ROW_CODECS = [IBPCodec, EBPCodec]
ALL_CODECS = [IBPCodec, EBPCodec, IdentityCodec]


def random_bits(n: int, d: int, seed: int = 0) -> torch.Tensor:
    """Rows of random float32 bits: every row of an IBP/EBP codec fitted on them is stored raw."""
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.integers(0, 2**32, (n, d), dtype=np.uint32).view(np.float32))


def strided(payload: torch.Tensor) -> torch.Tensor:
    """The same bytes as `payload`, as a non-contiguous view (every other byte of a larger buffer)."""
    big = torch.zeros(payload.numel(), 2, dtype=torch.uint8)
    big[:, 0] = payload
    view = big[:, 0]
    assert not view.is_contiguous() and torch.equal(view, payload)
    return view


# --------------------------------------------------------------------------- 1. non-contiguous payloads
@pytest.mark.parametrize("codec_cls", ROW_CODECS, ids=lambda c: c.name)
def test_a_strided_payload_is_refused_not_decoded_from_the_wrong_bytes(codec_cls):
    x = random_bits(50, 8)
    codec = codec_cls.fit(random_bits(2000, 8, seed=1))
    ct = codec.encode(x)
    assert int(ct.row_lengths().min()) == codec.row_nbytes  # raw rows: nothing would flag wrong bytes
    bad = dataclasses.replace(ct, payload=strided(ct.payload))
    with pytest.raises(ValueError, match=r"ct\.payload .*contiguous=False; accepted: a contiguous 1-d uint8 tensor"):
        codec.decode(bad)


@pytest.mark.parametrize("codec_cls", ROW_CODECS, ids=lambda c: c.name)
def test_a_strided_payload_is_refused_by_the_row_gather(codec_cls):
    x = random_bits(50, 8)
    codec = codec_cls.fit(x)
    bad = dataclasses.replace(codec.encode(x), payload=strided(codec.encode(x).payload))
    with pytest.raises(ValueError, match=r"payload .*contiguous 1-d uint8"):
        bad.index_select(torch.arange(5))


@pytest.mark.parametrize("codec_cls", ALL_CODECS, ids=lambda c: c.name)
def test_payloads_of_another_dtype_or_rank_are_refused_by_name(codec_cls):
    x = random_bits(20, 8)
    codec = codec_cls.fit(x)
    ct = codec.encode(x)
    padded = torch.cat([ct.payload, torch.zeros(8, dtype=torch.uint8)])
    for payload in (padded[: padded.numel() // 4 * 4].view(torch.int32), ct.payload.reshape(1, -1)):
        with pytest.raises(ValueError, match=r"ct\.payload .*accepted: a contiguous 1-d uint8 tensor"):
            codec.decode(dataclasses.replace(ct, payload=payload))


def test_identity_refuses_a_strided_payload_by_name():
    x = random_bits(20, 8)
    codec = IdentityCodec.fit(x)
    ct = codec.encode(x)
    with pytest.raises(ValueError, match=r"ct\.payload .*contiguous=False; accepted: a contiguous 1-d uint8 tensor"):
        codec.decode(dataclasses.replace(ct, payload=strided(ct.payload)))


@pytest.mark.parametrize("codec_cls", ALL_CODECS, ids=lambda c: c.name)
def test_contiguous_payloads_still_decode_and_gather(codec_cls):
    """The new check refuses nothing valid: an encoded tensor, a slice of a larger buffer, a gather."""
    x = random_bits(40, 8)
    x[::3] = 0
    codec = codec_cls.fit(x)
    ct = codec.encode(x)
    assert as_bytes(codec.decode(ct)) == as_bytes(x)
    longer = torch.cat([torch.zeros(3, dtype=torch.uint8), ct.payload, torch.zeros(5, dtype=torch.uint8)])[3:]
    assert as_bytes(codec.decode(dataclasses.replace(ct, payload=longer))) == as_bytes(x)
    rows = torch.tensor([5, 0, 39, 5])
    assert as_bytes(codec.decode(ct.index_select(rows))) == as_bytes(x[rows])


# --------------------------------------------------------------------------- 2. fit_codec's sample_rows
@pytest.mark.parametrize("kind", ["auto", "ibp", "ebp", "identity"])
@pytest.mark.parametrize("sample_rows", [0, -1, 1.5, True])
def test_fit_codec_names_a_bad_sample_rows(kind, sample_rows):
    x = torch.randn(5000, 8)
    with pytest.raises(ValueError, match=rf"sample_rows={sample_rows!r} is not accepted; use None or an int >= 1"):
        fit_codec(x, kind, sample_rows=sample_rows)


def test_rank_codecs_names_a_bad_sample_rows():
    with pytest.raises(ValueError, match=r"sample_rows=-1 is not accepted"):
        rank_codecs(torch.randn(5000, 8), sample_rows=-1)


# --------------------------------------------------------------------------- 3. damaged state dicts
def fitted(codec_cls):
    x = torch.randn(300, 6)
    x[::2] = 0
    return codec_cls.fit(x)


@pytest.mark.parametrize("codec_cls", ALL_CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("row_shape", [[-2, -3], [-6], [6, -1], "6", [2.5, 3], [True, 6]])
def test_a_state_with_a_bad_row_shape_is_refused_by_name(codec_cls, row_shape):
    state = fitted(codec_cls).state_dict()
    state["row_shape"] = row_shape
    with pytest.raises(CorruptPayloadError, match=r"row_shape=.*accepted: a list of integers >= 0"):
        codec_cls.from_state_dict(state)
    with pytest.raises(CorruptPayloadError, match=r"row_shape="):
        codec_from_state_dict(state)


@pytest.mark.parametrize("codec_cls", ALL_CODECS, ids=lambda c: c.name)
def test_a_state_lacking_a_key_names_it(codec_cls):
    for key in fitted(codec_cls).state_dict():
        if key in ("format_version", "codec", "threshold"):
            continue  # the header's own messages; IBP's threshold is optional
        state = fitted(codec_cls).state_dict()
        del state[key]
        with pytest.raises(CorruptPayloadError, match=f"lacks the key '{key}'"):
            codec_cls.from_state_dict(state)


@pytest.mark.parametrize("key,value", [("mask", "abc"), ("bitval", True), ("mask", torch.zeros(3)),
                                       ("word_bits", "abc"), ("word_bits", 32.5), ("word_bits", None)])
def test_a_damaged_ibp_state_is_a_corrupt_payload_naming_the_key(key, value):
    state = fitted(IBPCodec).state_dict()
    state[key] = value
    with pytest.raises(CorruptPayloadError, match=key):
        IBPCodec.from_state_dict(state)


@pytest.mark.parametrize("key", ["col_tid", "t_hw", "t_size"])
def test_an_ebp_state_with_an_out_of_range_integer_is_a_corrupt_payload(key):
    state = fitted(EBPCodec).state_dict()
    state[key] = 10**30
    with pytest.raises(CorruptPayloadError):
        EBPCodec.from_state_dict(state)


@pytest.mark.parametrize("codec_cls", ALL_CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("version", [torch.zeros(3), torch.tensor(1), [1], "1"])
def test_a_state_whose_format_version_is_not_an_integer_is_refused(codec_cls, version):
    state = fitted(codec_cls).state_dict()
    state["format_version"] = version
    with pytest.raises(CorruptPayloadError, match="format_version="):
        codec_cls.from_state_dict(state)


def test_codec_from_state_dict_names_an_unhashable_codec_name():
    with pytest.raises(CorruptPayloadError, match=r"names codec \['ibp'\]; known codecs"):
        codec_from_state_dict({"format_version": 1, "codec": ["ibp"]})


@pytest.mark.parametrize("codec_cls", ALL_CODECS, ids=lambda c: c.name)
def test_valid_states_still_round_trip(codec_cls):
    codec = fitted(codec_cls)
    again = codec_from_state_dict(codec.state_dict())
    assert type(again) is codec_cls and again.fingerprint == codec.fingerprint


# --------------------------------------------------------------------------- 4. IBP state aliasing
def test_an_ibp_codec_keeps_its_own_copy_of_the_state_it_was_built_from():
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(0, 0.1, (64, 16)).astype(np.float32))
    state = IBPCodec.fit(x).state_dict()
    codec = IBPCodec.from_state_dict(state)
    fingerprint = codec.fingerprint
    state["mask"].zero_()  # the caller reuses its state tensors (or loads another state into them)
    state["bitval"].zero_()
    assert codec.fingerprint == fingerprint
    y = torch.from_numpy(rng.normal(0, 0.1, (64, 16)).astype(np.float32))
    assert as_bytes(codec.decode(codec.encode(y))) == as_bytes(y)
