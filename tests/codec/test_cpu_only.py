"""The codecs are CPU-only: they import nothing of ibp_graph.gpu, and refuse a GPU target,
pointing to ibp_graph.gpu.decode."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from ibp_graph.codec import CorruptPayloadError, EBPCodec, IBPCodec, IdentityCodec

CODECS = [IBPCodec, EBPCodec, IdentityCodec]


def test_codecs_work_with_the_gpu_package_blocked():
    """With ibp_graph.gpu made unimportable, every codec fits, encodes, decodes, gathers and
    serializes on the CPU (and ibp_graph.codec.auto picks a codec)."""
    script = """
import sys
sys.modules["ibp_graph.gpu"] = None  # any import of it raises ImportError
import torch
import ibp_graph.codec as c
from ibp_graph.codec.auto import fit_codec
x = torch.arange(4000 * 16, dtype=torch.float32).reshape(4000, 16) % 7
for kind in (c.IBPCodec, c.EBPCodec, c.IdentityCodec):
    codec = kind.fit(x)
    ct = c.CompressedTensor.from_bytes(codec.encode(x).to_bytes())
    assert torch.equal(codec.decode(ct), x), kind
    assert torch.equal(codec.decode(ct.index_select(torch.tensor([5, 1, 3999]))), x[[5, 1, 3999]])
assert torch.equal(fit_codec(x).decode(fit_codec(x).encode(x)), x)
assert not [m for m in sys.modules if m.startswith("ibp_graph.gpu") and sys.modules[m] is not None]
print("ok")
"""
    got = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert got.returncode == 0 and got.stdout.strip() == "ok", got.stderr[-3000:]


@pytest.mark.parametrize("kind", CODECS)
@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda", 1), "meta"])
def test_decode_refuses_a_gpu_target_and_names_the_gpu_decoder(kind, device):
    x = torch.randn(50, 8)
    codec = kind.fit(x)
    ct = codec.encode(x)
    with pytest.raises(ValueError, match=r"device=.* is not accepted.*ibp_graph\.gpu\.decode"):
        codec.decode(ct, device=device)


@pytest.mark.parametrize("kind", CODECS)
def test_decode_accepts_none_and_cpu(kind):
    x = torch.randn(50, 8)
    codec = kind.fit(x)
    ct = codec.encode(x)
    for device in (None, "cpu", torch.device("cpu")):
        assert torch.equal(codec.decode(ct, device=device), x)
    with pytest.raises(ValueError, match="device='gpu0' is not a device"):
        codec.decode(ct, device="gpu0")


@pytest.mark.parametrize("kind", CODECS)
def test_codecs_expose_what_a_gpu_decoder_reads(kind):
    codec = kind.fit(torch.randn(50, 3, 4, dtype=torch.float16))
    assert codec.name in ("ibp", "ebp", "identity") and isinstance(codec.fingerprint, int)
    assert codec.dtype == torch.float16 and codec.row_shape == (3, 4) and codec.row_nbytes == 24
    assert codec.word_bits in (16, 32, 64)
    assert (codec.tables is None) == (kind is IdentityCodec)
    assert not hasattr(codec, "fetch")


@pytest.mark.parametrize("kind", CODECS)
def test_every_codec_saves_and_reloads_its_state_as_a_checked_blob(kind):
    x = torch.randn(60, 5, dtype=torch.float64)
    codec = kind.fit(x)
    ct = codec.encode(x)
    again = kind.from_bytes(codec.to_bytes())
    assert type(again) is kind and again.fingerprint == codec.fingerprint
    assert torch.equal(again.decode(ct), x)
    other = kind.fit(torch.randn(60, 2, dtype=torch.float16))
    other.load_state_dict(codec.state_dict())
    assert other.fingerprint == codec.fingerprint and torch.equal(other.decode(ct), x)
    blob = bytearray(codec.to_bytes())
    blob[-1] ^= 0xFF  # a damaged blob is named, not decoded
    with pytest.raises(CorruptPayloadError):
        kind.from_bytes(bytes(blob))
    with pytest.raises(CorruptPayloadError):
        kind.from_bytes(codec.to_bytes()[:-3])


def test_speed_target_on_a_gpu_needs_a_decoder():
    from ibp_graph.codec.auto import rank_codecs

    x = torch.randn(4000, 16)
    with pytest.raises(ValueError, match=r"device=cuda:0 needs a decoder.*decode=ibp_graph\.gpu\.decode"):
        rank_codecs(x, device="cuda:0", min_decode_gbps=1.0)
    calls = []

    def decode(codec, ct, out=None):
        calls.append(codec.name)
        return codec.decode(ct, out=out)

    ranked = rank_codecs(x, device="cpu", min_decode_gbps=1.0, decode=decode)
    assert calls and all(c.decode_gbps > 0 for c in ranked)
