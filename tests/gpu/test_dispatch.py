"""The GPU dispatch's own argument checks, without a GPU: a wrong codec, a tensor made by
another codec or state, a damaged layout, a wrong `checks` or `device`, pageable memory for
a zero-copy read, and what a CPU-only machine says. Also the package's one-call
``ibp_graph.decode`` and that ``import ibp_graph`` loads no GPU code."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap

import pytest
import torch

import ibp_graph
from ibp_graph import gpu
from ibp_graph.codec import (CodecMismatchError, CorruptPayloadError, EBPCodec, IBPCodec,
                             IdentityCodec)
from ibp_graph.gpu import dispatch

X = torch.randn(30, 8)
CODECS = [IBPCodec.fit(X), EBPCodec.fit(X), IdentityCodec.fit(X)]
IDS = [c.name for c in CODECS]


class NotACodec:
    name = "zstd"


@pytest.mark.parametrize("codec", [object(), NotACodec(), "ibp"])
def test_a_codec_of_no_known_kind_is_refused(codec):
    ct = CODECS[0].encode(X)
    for call in (lambda: gpu.decode(codec, ct), lambda: gpu.fetch(codec, ct, torch.arange(3))):
        with pytest.raises(TypeError, match=r"codec must be an IBPCodec, EBPCodec or IdentityCodec"
                                            r".*\['ibp', 'ebp', 'identity'\]"):
            call()


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_a_tensor_of_another_state_or_kind_is_refused(codec):
    other_state = type(codec).fit(X * 1000 + 5) if codec.name != "identity" else \
        IdentityCodec.fit(X.double())
    foreign = [c for c in CODECS if c.name != codec.name][0]
    for ct in (other_state.encode(X * 1000 + 5 if codec.name != "identity" else X.double()),
               foreign.encode(X)):
        with pytest.raises(CodecMismatchError, match="fingerprint"):
            gpu.decode(codec, ct)
        with pytest.raises(CodecMismatchError, match=r"table was encoded by codec"):
            gpu.fetch(codec, ct, torch.arange(3))


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_rows_of_another_shape_or_dtype_are_refused(codec):
    ct = codec.encode(X)
    for bad in (dataclasses.replace(ct, shape=(30, 4, 2)), dataclasses.replace(ct, dtype=torch.int32)):
        with pytest.raises(CodecMismatchError, match=r"ct holds rows of .*this codec decodes "
                                                     r"torch\.float32 \(8,\)"):
            gpu.decode(codec, bad)


@pytest.mark.parametrize("codec", CODECS[:2], ids=IDS[:2])
def test_a_damaged_layout_is_refused_before_any_gpu_work(codec):
    ct = codec.encode(X)
    with pytest.raises(CorruptPayloadError, match=r"ct\.offsets must have n_rows \+ 1 = 31 entries, has 30"):
        gpu.decode(codec, dataclasses.replace(ct, offsets=ct.offsets[:-1]))
    with pytest.raises(CorruptPayloadError, match=r"table\.offsets must have .* has None"):
        gpu.fetch(codec, dataclasses.replace(ct, offsets=None), torch.arange(3))
    with pytest.raises(ValueError, match=r"ct\.offsets has dtype=torch\.float32.*int32 or int64"):
        gpu.decode(codec, dataclasses.replace(ct, offsets=ct.offsets.float()))
    with pytest.raises(ValueError, match=r"ct\.payload has dtype=torch\.int32.*1-d uint8"):
        gpu.decode(codec, dataclasses.replace(ct, payload=ct.payload[:ct.payload.numel() // 4 * 4]
                                              .view(torch.int32)))
    with pytest.raises(TypeError, match=r"ct\.offsets must be a torch\.Tensor, got list"):
        gpu.decode(codec, dataclasses.replace(ct, offsets=ct.offsets.tolist()))
    with pytest.raises(TypeError, match=r"ct\.payload must be a torch\.Tensor, got bytes"):
        gpu.decode(codec, dataclasses.replace(ct, payload=b"\0" * 8))


def test_identity_layout_is_refused_before_any_gpu_work():
    codec = CODECS[2]
    ct = codec.encode(X)
    with pytest.raises(CorruptPayloadError, match=r"ct\.payload has 100 bytes, needs 960"):
        gpu.decode(codec, dataclasses.replace(ct, payload=ct.payload[:100]))
    with pytest.raises(ValueError, match=r"ct\.offsets is set.*accepted: None"):
        gpu.decode(codec, dataclasses.replace(ct, offsets=torch.zeros(31, dtype=torch.int32)))


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_checks_and_device_arguments_are_checked(codec):
    ct = codec.encode(X)
    for bad in (False, True, "later"):
        with pytest.raises(TypeError, match=rf"checks={bad!r} is not accepted.*PendingChecks"):
            gpu.decode(codec, ct, checks=bad)
        with pytest.raises(TypeError, match=rf"checks={bad!r} is not accepted"):
            gpu.fetch(codec, ct, torch.arange(3), checks=bad)
    with pytest.raises(ValueError, match=r"device='cpu' is not a CUDA device.*'cuda:N'"):
        gpu.decode(codec, ct, device="cpu")
    with pytest.raises(ValueError, match=r"device='gpu7' is not a device"):
        gpu.decode(codec, ct, device="gpu7")


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_a_zero_copy_read_of_pageable_memory_names_pin_memory(codec, monkeypatch):
    """Checked before any launch; here the gather is pretended to run on a GPU."""
    from ibp_graph.gpu import raw

    for mod in (dispatch, raw):
        monkeypatch.setattr(mod, "gather_device", lambda *a: torch.device("cuda", 0))
    ct = codec.encode(X)
    with pytest.raises(ValueError, match=r"table\.payload has .*pageable.*pin_memory"):
        gpu.fetch(codec, ct, torch.arange(3))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a machine without a GPU says")
@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_without_a_gpu_every_entry_point_says_so(codec):
    ct = codec.encode(X)
    for call in (lambda: gpu.decode(codec, ct), lambda: gpu.fetch(codec, ct, torch.arange(3)),
                 lambda: gpu.gather_raw_rows(X, torch.arange(3)),
                 lambda: ibp_graph.decode(codec, ct, device="cuda")):
        with pytest.raises(gpu.CudaUnavailableError, match=r"no CUDA device is available"):
            call()


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_package_decode_on_the_cpu_is_the_codecs(codec):
    ct = codec.encode(X)
    for device in (None, "cpu", torch.device("cpu")):
        got = ibp_graph.decode(codec, ct, device=device)
        assert got.device.type == "cpu" and torch.equal(got, X)
    with pytest.raises(ValueError, match=r"device='meta' is not accepted; use 'cpu', 'cuda'"):
        ibp_graph.decode(codec, ct, device="meta")


def test_importing_the_package_loads_no_gpu_code():
    code = textwrap.dedent("""
        import sys
        import ibp_graph
        loaded = sorted(m for m in sys.modules if m.startswith(("ibp_graph.", "cupy")))
        assert loaded == [], loaded
        from ibp_graph import gpu
        gpu.is_available()
        loaded = sorted(m for m in sys.modules if m.startswith("ibp_graph.gpu."))
        assert loaded == [], loaded
    """)
    subprocess.run([sys.executable, "-c", code], check=True)
