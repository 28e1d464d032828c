"""Encoded output is pinned byte for byte: blobs written by the codecs before the redesign of
issue 11 (tests/codec/pinned/) must be reproduced exactly by today's code, and decode back.

The inputs are made here with numpy's PCG64 (stable across numpy versions), not with the
library's generators, so a change in `ibp_graph.data` cannot move them. Each case pins the
codec's serialized state and the serialized CompressedTensor of the rows.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ibp_graph.codec import CompressedTensor, EBPCodec, IBPCodec, IdentityCodec, codec_from_state_dict
from ibp_graph.layout.format import state_from_bytes, state_to_bytes

PINNED = Path(__file__).with_name("pinned")


def _special_f32(rng: np.random.Generator, n: int) -> np.ndarray:
    """Embedding-like float32 rows with NaN payloads, -0.0, infinities and subnormals mixed in."""
    x = (rng.standard_normal((n, 24)) * 0.05).astype(np.float32)
    bits = x.view(np.uint32)
    bits[0, :6] = [0x7FC00001, 0xFFC12345, 0x80000000, 0x7F800000, 0xFF800000, 0x00000003]
    bits[n // 2, 3] = 0x807FFFFF  # negative subnormal
    return x


def _inputs() -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(20261201)
    f32 = _special_f32(rng, 96)
    f16 = (rng.standard_normal((80, 3, 5)) * 0.1).astype(np.float16)
    ids = rng.integers(0, 50_000, size=(70, 64), dtype=np.int64)
    bow = (rng.random((64, 40)) < 0.05).astype(np.float32)
    return {"f32": torch.from_numpy(f32), "f16": torch.from_numpy(f16),
            "i64": torch.from_numpy(ids), "bow": torch.from_numpy(bow)}


CASES = [  # (case name, codec factory, input name)
    ("ibp_f32", lambda t: IBPCodec.fit(t), "f32"),
    ("ibp_f16", lambda t: IBPCodec.fit(t), "f16"),
    ("ibp_i64", lambda t: IBPCodec.fit(t), "i64"),
    ("ebp_f32", lambda t: EBPCodec.fit(t), "f32"),
    ("ebp_bow", lambda t: EBPCodec.fit(t), "bow"),
    ("ebp_i64", lambda t: EBPCodec.fit(t), "i64"),
    ("identity_f16", lambda t: IdentityCodec.fit(t), "f16"),
]


def encode_case(name: str):
    """(codec state bytes, tensor bytes, the input) of one pinned case, from today's code."""
    factory, key = {c[0]: (c[1], c[2]) for c in CASES}[name]
    x = _inputs()[key]
    codec = factory(x)
    return state_to_bytes(codec.state_dict()), codec.encode(x).to_bytes(), x


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_encoded_bytes_match_the_pinned_blobs(name):
    state, blob, x = encode_case(name)
    assert state == (PINNED / f"{name}.state").read_bytes(), f"{name}: codec state bytes changed"
    assert blob == (PINNED / f"{name}.blob").read_bytes(), f"{name}: encoded bytes changed"


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_pinned_blobs_decode_to_their_inputs(name):
    _, _, x = encode_case(name)
    codec = codec_from_state_dict(state_from_bytes((PINNED / f"{name}.state").read_bytes()))
    ct = CompressedTensor.from_bytes((PINNED / f"{name}.blob").read_bytes())
    out = codec.decode(ct)
    assert out.dtype == x.dtype and out.shape == x.shape
    assert torch.equal(out.view(torch.uint8) if out.dtype == torch.bool else
                       out.reshape(-1).view(torch.uint8), x.reshape(-1).view(torch.uint8))


if __name__ == "__main__":  # writes the pinned files; run once, before a format-preserving change
    PINNED.mkdir(exist_ok=True)
    for case in CASES:
        state, blob, _ = encode_case(case[0])
        (PINNED / f"{case[0]}.state").write_bytes(state)
        (PINNED / f"{case[0]}.blob").write_bytes(blob)
        print(case[0], len(state), len(blob))
