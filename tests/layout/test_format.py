"""Serialized compressed tensors: a blob with a valid CRC but inconsistent contents (offsets
negative, float, decreasing or out of range, a wrong shape) raises CorruptPayloadError naming
what is wrong, for every codec, before any decoder sees it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ibp_graph.codec import CompressedTensor, CorruptPayloadError, EBPCodec, IBPCodec, IdentityCodec
from ibp_graph.layout.format import KIND_TENSOR, pack_blob, unpack_blob


def encoded(kind):
    x = torch.from_numpy(np.random.default_rng(0).normal(0, 0.1, (64, 12)).astype(np.float32))
    codec = kind.fit(x)
    return codec, x, codec.encode(x)


def reblob(ct: CompressedTensor, *, offsets="keep", payload=None, **meta) -> bytes:
    """ct's blob with some fields replaced, and a valid CRC."""
    m, sections = unpack_blob(ct.to_bytes(), KIND_TENSOR, "test")
    m.pop("sections")
    m.update(meta)
    if payload is not None:
        sections[0] = payload
    if offsets is None:
        sections = sections[:1]
    elif not isinstance(offsets, str):
        sections = [sections[0], offsets]
    return pack_blob(KIND_TENSOR, m, sections)


@pytest.mark.parametrize("kind", [IBPCodec, EBPCodec])
@pytest.mark.parametrize("change, match", [
    (lambda o: -o, r"offsets\[0\]|length -"),                                   # negative
    (lambda o: o.astype(np.float64), r"offsets of dtype float64"),               # float
    (lambda o: o[::-1].copy(), r"offsets\[0\] is \d+, must be 0"),               # decreasing
    (lambda o: np.concatenate([o[:5], o[4:5] - 1, o[6:]]), r"row 4 the length -1"),
    (lambda o: np.concatenate([o[:-1], o[-1:] + 10**6]), r"row 63 the length|needs at least"),
    (lambda o: o[:-1], r"\d+ offsets of dtype .* for 64 rows"),
])
def test_bad_offsets_in_a_blob_raise_corrupt_payload(kind, change, match):
    codec, x, ct = encoded(kind)
    assert torch.equal(codec.decode(CompressedTensor.from_bytes(ct.to_bytes())), x)
    blob = reblob(ct, offsets=change(ct.offsets.numpy().astype(np.int64)))
    with pytest.raises(CorruptPayloadError, match=match):
        CompressedTensor.from_bytes(blob)


@pytest.mark.parametrize("kind", [IBPCodec, EBPCodec, IdentityCodec])
@pytest.mark.parametrize("shape, match", [
    ([-64, 12], "shape"), ([64.0, 12], "shape"), ([], "shape"), ("64x12", "shape"),
])
def test_bad_shape_in_a_blob_raises(kind, shape, match):
    _, _, ct = encoded(kind)
    with pytest.raises(CorruptPayloadError, match=match):
        CompressedTensor.from_bytes(reblob(ct, shape=shape))


def test_identity_blob_with_a_wrong_shape_or_offsets_is_refused():
    codec, x, ct = encoded(IdentityCodec)
    with pytest.raises(CorruptPayloadError, match=r"payload bytes; shape \(65, 12\)"):
        CompressedTensor.from_bytes(reblob(ct, shape=[65, 12]))
    offsets = np.arange(0, 65 * 48, 48, dtype=np.int64)
    ct2 = CompressedTensor.from_bytes(reblob(ct, offsets=offsets, has_offsets=True,
                                            payload=np.zeros(64 * 48 + 16, np.uint8)))
    with pytest.raises(CorruptPayloadError, match="identity rows have a fixed stride"):
        codec.decode(ct2)


@pytest.mark.parametrize("meta, match", [
    ({"has_offsets": "yes"}, "has_offsets"), ({"fingerprint": 1.5}, "fingerprint"),
    ({"dtype": "complex64"}, "complex64"), ({"has_offsets": False}, "sections"),
])
def test_bad_metadata_in_a_blob_raises(meta, match):
    _, _, ct = encoded(IBPCodec)
    with pytest.raises(CorruptPayloadError, match=match):
        CompressedTensor.from_bytes(reblob(ct, **meta))


def test_payload_of_another_dtype_is_refused():
    _, _, ct = encoded(IBPCodec)
    with pytest.raises(CorruptPayloadError, match="payload of dtype int16"):
        CompressedTensor.from_bytes(reblob(ct, payload=ct.payload.numpy().view(np.int16)))


@pytest.mark.parametrize("kind", [IBPCodec, EBPCodec])
def test_decode_refuses_offsets_of_another_dtype_before_any_kernel(kind):
    """A CompressedTensor built by hand with float offsets is refused by name (numba would
    otherwise compile the kernel for floats and fail inside LLVM)."""
    codec, x, ct = encoded(kind)
    bad = CompressedTensor(payload=ct.payload, offsets=ct.offsets.to(torch.float64), shape=ct.shape,
                           dtype=ct.dtype, codec=ct.codec, fingerprint=ct.fingerprint)
    with pytest.raises(CorruptPayloadError, match=r"ct\.offsets is dtype=float64 .*int32 or int64"):
        codec.decode(bad)
    with pytest.raises(CorruptPayloadError, match="int32 or int64"):
        bad.index_select(torch.tensor([0]))
