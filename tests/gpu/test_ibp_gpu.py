"""GPU decoders checked bit for bit against the CPU codec, on fresh random data every run.

Run on a machine with a CUDA GPU: ``python -m pytest -m gpu`` (CI deselects these with
``-m "not gpu"``). Selecting them explicitly without a GPU fails loudly instead of
skipping, so a GPU check can never pass by testing nothing.

Every output buffer is poisoned (all bytes 0xFF) before the launch, so a row the kernel
forgets to write cannot pass as a match.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ibp_graph
from ibp_graph import gpu
from ibp_graph.codec import CodecMismatchError, CorruptPayloadError, IBPCodec, IdentityCodec

from tests.gpu.test_ibp_compile import (DTYPES, adversarial_rows, crafted_codec, new_seed, row_bytes,
                                      rows_for_codec)

pytestmark = pytest.mark.gpu

GPU_SETTINGS = settings(max_examples=25, deadline=None,
                        suppress_health_check=[HealthCheck.function_scoped_fixture,
                                               HealthCheck.too_slow, HealthCheck.data_too_large])
ROW_SHAPES = [(1,), (2,), (3,), (5,), (7,), (13,), (31,), (33,), (64,), (100,), (128,), (2, 3),
              (4, 25)]


@pytest.fixture(scope="module", autouse=True)
def gpu(request):
    """The CUDA device; a loud failure, not a skip, when GPU tests run without one."""
    if not torch.cuda.is_available():
        expr = request.config.getoption("markexpr", "") or ""
        why = (f"torch.cuda.is_available() is False (torch {torch.__version__}, CUDA build "
               f"{torch.version.cuda})")
        if "gpu" in expr and "not gpu" not in expr:
            pytest.fail(f"GPU tests were selected with -m {expr!r} but {why}: this machine "
                        "cannot check the CUDA kernels", pytrace=False)
        pytest.skip(f"GPU test: {why}; run with -m gpu on a GPU machine")
    import cupy  # noqa: F401  (a missing CuPy must fail here, clearly)

    return torch.device("cuda", torch.cuda.current_device())


def poisoned(shape, dtype, device="cuda") -> torch.Tensor:
    """An output buffer whose every byte is 0xFF."""
    t = torch.empty(shape, dtype=dtype, device=device)
    t.view(torch.uint8).fill_(0xFF)
    return t


def decode_on_gpu(codec, ct) -> torch.Tensor:
    out = poisoned(ct.shape, codec.dtype)
    got = gpu.decode(codec, ct.to("cuda"), out=out)
    assert got is out
    torch.cuda.synchronize()
    return out


def fetch_on_gpu(codec, table, index) -> torch.Tensor:
    out = poisoned((len(index),) + tuple(codec.row_shape), codec.dtype)
    got = gpu.fetch(codec, table, index, out=out)
    assert got is out
    torch.cuda.synchronize()
    return out


def assert_same_bits(got: torch.Tensor, want: torch.Tensor, what: str = "") -> None:
    g, w = row_bytes(got), row_bytes(want)
    assert g.shape == w.shape, what
    if not np.array_equal(g, w):
        bad = np.flatnonzero(g != w)
        raise AssertionError(f"{what}: {bad.size} of {g.size} bytes differ, first at byte "
                             f"{bad[0]}: got {g[bad[0]]:#04x}, want {w[bad[0]]:#04x}")


# --------------------------------------------------------------------------- decode
@GPU_SETTINGS
@given(dtype=st.sampled_from(DTYPES), W=st.sampled_from([32, 64]),
       row_shape=st.sampled_from(ROW_SHAPES), n=st.integers(1, 700),
       raw=st.sampled_from([0.0, 0.1, 0.5, 1.0]), seed=st.integers(0, 2**32 - 1))
def test_decode_matches_cpu(dtype, W, row_shape, n, raw, seed):
    rng = np.random.default_rng(seed)
    x = adversarial_rows(rng, n, row_shape, dtype, raw_fraction=raw)
    codec = IBPCodec.fit(x, word_bits=W)
    ct = codec.encode(x)
    want = codec.decode(ct)
    assert_same_bits(want, x, "CPU round trip")
    assert_same_bits(decode_on_gpu(codec, ct), want, f"gpu.decode seed={seed}")
    # a host tensor is copied over first; the package's one-call decode lands in the same kernel
    assert_same_bits(gpu.decode(codec, ct.pin_memory()), want, "gpu.decode(pinned host ct)")
    assert_same_bits(ibp_graph.decode(codec, ct.pin_memory(), device="cuda"), want,
                     "ibp_graph.decode(cuda)")


@GPU_SETTINGS
@given(kind=st.sampled_from(["zero", "ones", "alt", "random", "mixed"]),
       W=st.sampled_from([32, 64]),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.float64, torch.int8,
                              torch.int32, torch.int64, torch.uint8, torch.bfloat16]),
       row_shape=st.sampled_from(ROW_SHAPES), p_part=st.sampled_from([0.0, 0.5, 0.9, 1.0]),
       seed=st.integers(0, 2**32 - 1))
def test_decode_crafted_masks(kind, W, dtype, row_shape, p_part, seed):
    """Adversarial codec states: no free bit, all bits free, alternating bits (W/2 runs)."""
    rng = np.random.default_rng(seed)
    codec = crafted_codec(rng, dtype, row_shape, W, kind)
    x = rows_for_codec(rng, codec, int(rng.integers(1, 400)), p_part=p_part)
    ct = codec.encode(x)
    assert_same_bits(decode_on_gpu(codec, ct), x, f"crafted {kind} seed={seed}")


@pytest.mark.parametrize("W", [32, 64])
def test_decode_int64_offsets_and_many_rows(W):
    """A table large enough that every resident group loops (grid-stride), int64 offsets."""
    seed = new_seed()
    rng = np.random.default_rng(seed)
    x = adversarial_rows(rng, 40_000, (128,), torch.float32, raw_fraction=0.05)
    x = x.repeat(8, 1)  # 320k rows
    codec = IBPCodec.fit(x, word_bits=W)
    ct = codec.encode(x)
    ct64 = dataclasses.replace(ct, offsets=ct.offsets.to(torch.int64))
    assert_same_bits(decode_on_gpu(codec, ct64), x, f"int64 offsets seed={seed}")
    assert_same_bits(decode_on_gpu(codec, ct), x, f"int32 offsets seed={seed}")


@pytest.mark.parametrize("dim", [3000, 16_000])
def test_decode_wide_rows(dim):
    """12 KB rows (binary bag of words) and 64 KB rows (opt-in shared memory)."""
    seed = new_seed()
    rng = np.random.default_rng(seed)
    x = torch.from_numpy((rng.random((40, dim)) < 0.02).astype(np.float32))
    x[3] = torch.from_numpy(rng.standard_normal(dim).astype(np.float32))  # an exception-heavy row
    codec = IBPCodec.fit(x, word_bits=32)
    ct = codec.encode(x)
    assert_same_bits(decode_on_gpu(codec, ct), x, f"dim={dim} seed={seed}")
    index = torch.from_numpy(rng.integers(0, 40, 77)).cuda()
    assert_same_bits(fetch_on_gpu(codec, ct.pin_memory(), index), x[index.cpu()], "fetch wide")


def test_rows_too_wide_for_shared_memory_are_refused():
    x = torch.zeros(2, 200_000, dtype=torch.float32)
    codec = IBPCodec.fit(x, word_bits=64)
    with pytest.raises(ValueError, match="shared memory"):
        gpu.decode(codec, codec.encode(x).to("cuda"))


def test_decode_on_a_side_stream():
    seed = new_seed()
    x = adversarial_rows(np.random.default_rng(seed), 5000, (128,), torch.float32)
    codec = IBPCodec.fit(x)
    ct = codec.encode(x).pin_memory()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        dev = ct.to("cuda", non_blocking=True)
        out = gpu.decode(codec, dev)
    s.synchronize()
    assert_same_bits(out, x, f"side stream seed={seed}")


def test_decode_empty():
    x = torch.randn(5, 16)
    codec = IBPCodec.fit(x)
    empty = codec.encode(x[:0])
    assert gpu.decode(codec, empty.to("cuda")).shape == (0, 16)


# --------------------------------------------------------------------------- fetch
@GPU_SETTINGS
@given(dtype=st.sampled_from(DTYPES), W=st.sampled_from([32, 64]),
       row_shape=st.sampled_from(ROW_SHAPES), n=st.integers(1, 500),
       n_index=st.integers(0, 900), where=st.sampled_from(["pinned", "pinned+gpu offsets", "gpu"]),
       index_on=st.sampled_from(["cuda", "cpu"]), seed=st.integers(0, 2**32 - 1))
def test_fetch_matches_cpu(dtype, W, row_shape, n, n_index, where, index_on, seed):
    rng = np.random.default_rng(seed)
    x = adversarial_rows(rng, n, row_shape, dtype, raw_fraction=0.15)
    codec = IBPCodec.fit(x, word_bits=W)
    ct = codec.encode(x)
    want_all = codec.decode(ct)
    table = ct.pin_memory()
    if where == "pinned+gpu offsets":
        table = dataclasses.replace(table, offsets=table.offsets.cuda())
    elif where == "gpu":
        table = ct.to("cuda")
    index = torch.from_numpy(rng.integers(0, n, n_index)).to(index_on)
    got = fetch_on_gpu(codec, table, index)
    assert_same_bits(got, want_all[index.cpu()], f"fetch {where} seed={seed}")
    if where == "pinned":  # without an out buffer: allocated on the index's device
        assert_same_bits(gpu.fetch(codec, table, index), want_all[index.cpu()], "gpu.fetch")


def test_fetch_misaligned_pinned_payload():
    """A payload that starts at an odd address inside its pinned allocation."""
    seed = new_seed()
    rng = np.random.default_rng(seed)
    x = adversarial_rows(rng, 300, (33,), torch.float32)
    codec = IBPCodec.fit(x, word_bits=64)
    ct = codec.encode(x)
    for shift in (1, 3, 8, 13):
        big = torch.zeros(ct.payload.numel() + 16, dtype=torch.uint8).pin_memory()
        view = big[shift:shift + ct.payload.numel()]
        view.copy_(ct.payload)
        table = dataclasses.replace(ct, payload=view, offsets=ct.offsets.pin_memory())
        index = torch.from_numpy(rng.integers(0, 300, 1000)).cuda()
        assert_same_bits(fetch_on_gpu(codec, table, index), x[index.cpu()], f"shift={shift}")


@pytest.mark.parametrize("bad", [-1, 1000, 2**40])
def test_fetch_out_of_range_index_raises(bad):
    x = torch.randn(1000, 64)
    codec = IBPCodec.fit(x)
    table = codec.encode(x).pin_memory()
    index = torch.arange(0, 1000, 7, device="cuda")
    index[11] = bad
    with pytest.raises(IndexError, match=rf"index\[11\] = {bad}\b.*0 <= index < 1000"):
        gpu.fetch(codec, table, index)
    torch.cuda.synchronize()  # the failed launch left the device healthy
    assert_same_bits(gpu.fetch(codec, table, index[:11]), x[index[:11].cpu()], "after an IndexError")


def test_corrupt_rows_raise():
    x = adversarial_rows(np.random.default_rng(new_seed()), 64, (64,), torch.float32, raw_fraction=0)
    codec = IBPCodec.fit(x, word_bits=32)
    ct = codec.encode(x)
    offs = ct.offsets.clone()
    offs[10] = offs[9] + codec.row_nbytes + 8  # row 9 longer than a raw row
    bad = dataclasses.replace(ct, offsets=offs)
    with pytest.raises(CorruptPayloadError, match="row 9"):
        gpu.decode(codec, bad.to("cuda"))
    with pytest.raises(CorruptPayloadError, match="row 9"):
        gpu.fetch(codec, bad.pin_memory(), torch.tensor([1, 9, 3], device="cuda"))


def test_deferred_checks_raise_later_and_only_then():
    """checks=PendingChecks: the decode returns without waiting; raise_first() raises what
    checks=None would have, for the first failing call, and empties the record."""
    x = adversarial_rows(np.random.default_rng(new_seed()), 64, (64,), torch.float32, raw_fraction=0)
    codec = IBPCodec.fit(x, word_bits=32)
    ct = codec.encode(x)
    offs = ct.offsets.clone()
    offs[10] = offs[9] + codec.row_nbytes + 8  # row 9 longer than a raw row
    bad = dataclasses.replace(ct, offsets=offs).to("cuda")
    checks = gpu.PendingChecks()
    good = gpu.decode(codec, ct.to("cuda"), checks=checks)  # no error: nothing to raise
    gpu.decode(codec, bad, checks=checks)  # returns: the check waits in `checks`
    gpu.fetch(codec, ct.pin_memory(), torch.tensor([1, 64], device="cuda"), checks=checks)
    torch.cuda.synchronize()
    with pytest.raises(CorruptPayloadError, match="row 9"):
        checks.raise_first()
    checks.raise_first()  # emptied by the first call
    assert_same_bits(good, x, "decode with deferred checks")


# --------------------------------------------------------------------------- raw gather
@GPU_SETTINGS
@given(dtype=st.sampled_from(DTYPES), row_shape=st.sampled_from(ROW_SHAPES + [(3000,)]),
       n=st.integers(1, 400), n_index=st.integers(0, 700), shift=st.sampled_from([0, 1, 2, 3]),
       seed=st.integers(0, 2**32 - 1))
def test_gather_raw_rows_matches_index_select(dtype, row_shape, n, n_index, shift, seed):
    """Zero-copy gather from a pinned table starting `shift` elements into its allocation
    (so at every alignment torch can express: 1-byte dtypes at any byte)."""
    rng = np.random.default_rng(seed)
    x = adversarial_rows(rng, n, row_shape, dtype, raw_fraction=0.3)
    big = torch.zeros(x.numel() + 16, dtype=dtype).pin_memory()
    table = big[shift:shift + x.numel()].view(x.shape)
    table.copy_(x)
    index = torch.from_numpy(rng.integers(0, n, n_index)).cuda()
    out = poisoned((n_index,) + tuple(row_shape), dtype)
    assert gpu.gather_raw_rows(table, index, out=out) is out
    assert_same_bits(out, x[index.cpu()], f"gather seed={seed}")


def test_identity_fetch_and_gather_errors():
    x = torch.randn(100, 128)
    ident = IdentityCodec.fit(x)
    table = ident.encode(x).pin_memory()
    index = torch.randint(0, 100, (500,), device="cuda")
    assert_same_bits(gpu.fetch(ident, table, index), x[index.cpu()], "identity fetch")
    out = poisoned((100, 128), torch.float32)  # on "cuda:0"; the target "cuda" is that device
    assert gpu.decode(ident, table, device="cuda", out=out) is out
    assert_same_bits(out, x, "identity decode into out")
    with pytest.raises(IndexError, match=r"index\[3\] = 100\b"):
        gpu.gather_raw_rows(x.pin_memory(), torch.tensor([0, 1, 2, 100], device="cuda"))
    with pytest.raises(ValueError, match="pin_memory"):
        gpu.gather_raw_rows(x, index)


# --------------------------------------------------------------------------- bad input
def test_bad_inputs_name_the_argument():
    x = torch.randn(50, 32)
    codec = IBPCodec.fit(x)
    ct = codec.encode(x)
    dev = ct.to("cuda")
    pinned = ct.pin_memory()
    index = torch.arange(10, device="cuda")
    with pytest.raises(ValueError, match=r"device='cpu' is not a CUDA device"):
        gpu.decode(codec, dev, device="cpu")
    with pytest.raises(ValueError, match=r"table\.payload .*pageable.*pin_memory"):
        gpu.fetch(codec, ct, index)
    with pytest.raises(TypeError, match=r"out has dtype=torch\.float64.*torch\.float32"):
        gpu.decode(codec, dev, out=torch.empty(50, 32, dtype=torch.float64, device="cuda"))
    with pytest.raises(ValueError, match=r"out has shape \(50, 31\).*\(50, 32\)"):
        gpu.decode(codec, dev, out=torch.empty(50, 31, device="cuda"))
    with pytest.raises(ValueError, match=r"out is on cpu"):
        gpu.decode(codec, dev, out=torch.empty(50, 32))
    with pytest.raises(ValueError, match=r"out is not contiguous"):
        gpu.decode(codec, dev, out=torch.empty(32, 50, device="cuda").t())
    with pytest.raises(TypeError, match=r"index has dtype=torch\.int32.*int64"):
        gpu.fetch(codec, pinned, index.to(torch.int32))
    with pytest.raises(TypeError, match=r"index must be a torch\.Tensor"):
        gpu.fetch(codec, pinned, [1, 2, 3])
    other = IBPCodec.fit(torch.randn(50, 32) * 1000)
    assert other.fingerprint != codec.fingerprint
    with pytest.raises(CodecMismatchError, match="fingerprint"):
        gpu.decode(other, dev)
    with pytest.raises(CodecMismatchError, match="fingerprint"):
        gpu.fetch(other, pinned, index)
    with pytest.raises(TypeError, match="CompressedTensor"):
        gpu.decode(codec, dev.payload)


def test_kernels_load_on_the_device():
    """Compiled for this device's arch, loaded into torch's context, queryable."""
    from ibp_graph.gpu import runtime as rt

    k = rt.get_kernel("ibp_decode_w32_g32", torch.cuda.current_device())
    assert k.ptr != 0
    assert rt.sm_count(k.device) > 0
    assert math.isfinite(rt.occupancy(k, 256, 4096))
