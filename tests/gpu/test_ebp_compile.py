"""EBP CUDA kernels without a GPU: they compile for sm_80 and sm_90 through the run-time path,
the host passes exactly the kernels' parameters, and the kernel source decodes bit for bit
when compiled as host C++ under the warp emulation of tests/gpu/test_ibp_compile.py (threads
as lanes, barriers for the warp intrinsics, AddressSanitizer and UBSan on every access).

What the emulation cannot check: speed, the memory model, that the GPU's intrinsics behave
like the emulated ones, and zero-copy reads of pinned memory (the gather kernel runs here on
ordinary host memory). tests/gpu/test_ibp_gpu.py-style GPU tests must do that on a device.
"""
from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ibp_graph import gpu
from ibp_graph.codec import EBPCodec
from ibp_graph.gpu import abi
from ibp_graph.gpu import compiler as cc
from ibp_graph.gpu import ebp as E

from tests.codec.test_ebp import crafted_codec, rows_for
from tests.gpu.test_ibp_compile import (SHIM, adversarial_rows, build_emulator, new_seed, row_bytes,
                                      run_harness)

EBP_KERNELS = [k for k, e in abi.KERNELS.items() if e.source == "ebp_decode.cu"]


# --------------------------------------------------------------------------- compilation
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ebp_kernels_compile(arch):
    binary = cc.compile_cubin("ebp_decode.cu", arch)
    assert binary[:4] == b"\x7fELF"
    assert sorted(EBP_KERNELS) == ["ebp_decode_w16", "ebp_decode_w32", "ebp_decode_w64",
                                   "ebp_decode_w8", "ebp_gather"]
    for k in EBP_KERNELS:
        assert k.encode() in binary


def test_host_checks_need_no_gpu():
    x = torch.randn(20, 8)
    codec = EBPCodec.fit(x)
    ct = codec.encode(x)
    with pytest.raises(TypeError, match=r"ct must be a CompressedTensor"):
        gpu.decode(codec, ct.payload)
    with pytest.raises(TypeError, match=r"codec must be an IBPCodec, EBPCodec or IdentityCodec"):
        gpu.decode(object(), ct)
    with pytest.raises(TypeError, match=r"index has dtype=torch\.int32.*int64"):
        gpu.fetch(codec, ct, torch.zeros(3, dtype=torch.int32))
    if not torch.cuda.is_available():
        with pytest.raises(gpu.CudaUnavailableError, match="no CUDA device"):
            gpu.fetch(codec, ct, torch.zeros(3, dtype=torch.int64))
        with pytest.raises(gpu.CudaUnavailableError, match="no CUDA device"):
            gpu.decode(codec, ct)


def test_decode_tables_layout():
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(0, 0.1, (500, 40)).astype(np.float32))
    x[::2, 5:] = 0
    codec = EBPCodec.fit(x)
    t = codec.tables
    tabs = E.host_tables(codec)
    ci = tabs.colinfo
    assert ci.shape == (40,) and ci.dtype == abi.EBP_COLUMN and ci.itemsize == 16
    assert list(ci["low_at"]) == list(np.concatenate([[0], np.cumsum(t.col_lw)[:-1]]))
    assert (ci["low_bits"] == t.col_lw).all() and (ci["tid"] == t.col_tid).all()
    assert (ci["sparse_tid"] == (t.col_tids if t.sparse else 0)).all()
    assert tabs.dlut.shape == (t.n_tables, 256) and (tabs.dlut == t.dlut).all()
    assert (tabs.dict == t.t_dict).all() and (tabs.defaults == t.col_default).all()
    assert (tabs.d, tabs.HE, tabs.LS, tabs.IB, tabs.low_total) == (t.d, t.HE, t.LS, t.IB, t.low_total)
    assert E.scratch_stride(512) % 16 == 0 and E.scratch_stride(512) >= 512 + 15 + 12


# --------------------------------------------------------------------------- warp emulation
EXTRA_SHIM = r"""
// Warp intrinsics the EBP kernels use beyond tests/gpu/test_ibp_compile.py's shim.
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
template <class T> static T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  emu_slot[threadIdx.x] = (unsigned long long)v;
  emu_sync(mask);
  const unsigned l = threadIdx.x & 31u;
  const unsigned s = l ^ (unsigned)lane_mask;
  if (!((mask >> s) & 1u)) emu_fail("shfl_xor source lane not in mask");
  T r = (T)emu_slot[(threadIdx.x & ~31u) + s];
  emu_sync(mask);
  return r;
}
static unsigned __ballot_sync(unsigned mask, int pred) {
  emu_slot[threadIdx.x] = pred ? 1ull : 0ull;
  emu_sync(mask);
  unsigned r = 0;
  for (unsigned l = 0; l < 32; ++l)
    if (((mask >> l) & 1u) && emu_slot[(threadIdx.x & ~31u) + l]) r |= 1u << l;
  emu_sync(mask);
  return r;
}
"""

HARNESS = r"""
#include "shim.h"
#include "ebp_decode.cu"
#include <fstream>
#include <string>
#include <thread>
static std::vector<unsigned char> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<unsigned char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
template <class T> static T* exact(const std::vector<unsigned char>& v) {  // exact-size heap copy
  T* p = (T*)std::aligned_alloc(16, (v.size() + 15) / 16 * 16 + 16);
  if (!v.empty()) std::memcpy(p, v.data(), v.size());
  return p;
}
static void* alloc16(long size) { return std::aligned_alloc(16, (size + 15) / 16 * 16); }
template <class F> static void launch(long grid, long block, F body) {
  emu_group = 32;
  blockDim = {(unsigned)block, 1, 1};
  gridDim = {(unsigned)grid, 1, 1};
  for (long b = 0; b < grid; ++b) {
    blockIdx = {(unsigned)b, 0, 0};
    std::memset(ebp_sym, 0xA5, sizeof(ebp_sym));  // shared memory starts as garbage
    emu_bars.clear();
    for (long k = 0; k < block / 32; ++k) emu_bars.emplace_back(new std::barrier<>(32));
    std::vector<std::thread> ts;
    for (long t = 0; t < block; ++t)
      ts.emplace_back([&, t] { threadIdx = {(unsigned)t, 0, 0}; body(); });
    for (auto& t : ts) t.join();
  }
}
typedef void (*decode_fn)(const u8*, const void*, int, const i64*, const i64*, const int*, i64, i64,
                          i64, const EbpColumn*, const u64*, const u16*, const u64*, int, int, int, int,
                          int, int, int, u8*, u64*);
int main(int argc, char** argv) {
  std::string dir = argv[1];
  std::ifstream pf(dir + "/params.txt");
  long W, fetch, n_out, n_rows, payload_shift, off64, has_index, d, row_nbytes, sparse, HE, LS, IB,
      low_total, out_shift, block, grid, stride;
  pf >> W >> fetch >> n_out >> n_rows >> payload_shift >> off64 >> has_index >> d >> row_nbytes >>
      sparse >> HE >> LS >> IB >> low_total >> out_shift >> block >> grid >> stride;
  auto payload = slurp(dir + "/payload.bin");
  long span = ((payload_shift + (long)payload.size() + 15) / 16) * 16;
  unsigned char* praw = (unsigned char*)std::aligned_alloc(16, span + 16);
  std::memset(praw, 0xCD, span + 16);
  if (!payload.empty()) std::memcpy(praw + payload_shift, payload.data(), payload.size());
  const u8* payload_p = praw + payload_shift;
  auto offsets = exact<void>(slurp(dir + "/offsets.bin"));
  auto index_v = slurp(dir + "/index.bin");
  i64* index_p = has_index ? exact<i64>(index_v) : nullptr;
  auto colinfo = exact<EbpColumn>(slurp(dir + "/colinfo.bin"));
  auto defaults = exact<u64>(slurp(dir + "/defaults.bin"));
  auto dlut = exact<u16>(slurp(dir + "/dlut.bin"));
  auto dict = exact<u64>(slurp(dir + "/dict.bin"));
  long out_bytes = n_out * row_nbytes;
  unsigned char* oraw = (unsigned char*)std::aligned_alloc(16, (out_bytes + out_shift + 16) / 16 * 16 + 16);
  std::memset(oraw, 0xFF, out_bytes + out_shift + 1);  // poisoned output
  u8* out = oraw + out_shift;
  u64 err[2] = {~0ull, ~0ull};
  decode_fn dfn = W == 8 ? ebp_decode_w8 : W == 16 ? ebp_decode_w16 : W == 32 ? ebp_decode_w32
                                                                              : ebp_decode_w64;
  if (!fetch) {
    launch(grid, block, [&] {
      dfn(payload_p, offsets, (int)off64, index_p, nullptr, nullptr, n_out, n_rows,
          (i64)payload.size(), colinfo, defaults, dlut, dict, (int)d, (int)row_nbytes, (int)sparse,
          (int)HE, (int)LS, (int)IB, (int)low_total, out, err);
    });
  } else {  // zero-copy path: gather into scratch slots, then decode from there
    u8* scratch = (u8*)alloc16(n_out * stride + 16);
    std::memset(scratch, 0xEE, n_out * stride + 16);
    i64* starts = (i64*)alloc16(n_out * 8);
    int* lens = (int*)alloc16(n_out * 4);
    std::memset(starts, 0x77, n_out * 8);
    std::memset(lens, 0x77, n_out * 4);
    launch(grid, block, [&] {
      ebp_gather(payload_p, offsets, (int)off64, index_p, n_out, n_rows, (i64)payload.size(),
                 (int)row_nbytes, stride, scratch, starts, lens, err);
    });
    launch(grid, block, [&] {
      dfn(scratch, nullptr, 0, index_p, starts, lens, n_out, n_rows, n_out * stride + 16, colinfo,
          defaults, dlut, dict, (int)d, (int)row_nbytes, (int)sparse, (int)HE, (int)LS, (int)IB,
          (int)low_total, out, err);
    });
  }
  if (oraw[out_bytes + out_shift] != 0xFF) { std::fprintf(stderr, "write past out\n"); return 3; }
  for (long k = 0; k < out_shift; ++k)
    if (oraw[k] != 0xFF) { std::fprintf(stderr, "write before out\n"); return 3; }
  std::ofstream of(dir + "/out.bin", std::ios::binary);
  of.write((const char*)out, out_bytes);
  std::ofstream ef(dir + "/err.bin", std::ios::binary);
  ef.write((const char*)err, sizeof(err));
  return 0;
}
"""


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    """The EBP kernels compiled as host C++ with the warp emulation (ASan + UBSan when available)."""
    return Emulator(build_emulator(tmp_path_factory, "ebp_emu", SHIM + EXTRA_SHIM, HARNESS,
                                      ("ebp_decode.cu",)))


class Emulator:
    """Runs the decode (or the gather + decode of a fetch) on the host: output bytes, error slots."""

    def __init__(self, exe):
        self.exe = str(exe)

    def run(self, tmp, codec, ct, index=None, *, fetch=False, payload_shift=0, out_shift=0,
            block=64, grid=2):
        t = codec.tables
        tabs = E.host_tables(codec)
        n_out = ct.n_rows if index is None else len(index)
        idx = np.zeros(0, np.int64) if index is None else np.asarray(index, dtype=np.int64)
        params = [t.W, int(fetch), n_out, ct.n_rows, payload_shift, ct.offsets.dtype == torch.int64,
                  index is not None, t.d, t.row_nbytes, int(t.sparse), t.HE, t.LS, t.IB,
                  t.low_total, out_shift, block, grid, E.scratch_stride(t.row_nbytes)]
        arrays = {"payload": ct.payload.numpy(), "offsets": ct.offsets.numpy(), "index": idx,
                  "colinfo": tabs.colinfo, "defaults": tabs.defaults, "dlut": tabs.dlut,
                  "dict": tabs.dict}
        return run_harness(self.exe, str(tmp), params, arrays, timeout=600)


def _expect(codec, ct, index=None) -> np.ndarray:
    ref = codec.decode(ct)
    if index is not None:
        ref = ref[torch.as_tensor(np.asarray(index), dtype=torch.int64)]
    return row_bytes(ref)


def _sparse_rows(rng, n, shape, dtype):
    x = adversarial_rows(rng, n, shape, dtype, raw_fraction=0.1)
    flat = x.reshape(n, -1)
    keep = torch.from_numpy(rng.random(flat.shape) < 0.15)
    zero = torch.zeros((), dtype=dtype)
    return torch.where(keep, flat, zero).reshape(x.shape).contiguous()


# One case per element width, rows narrower and wider than a warp's 32 lanes and the
# 128-element parsing round, rows that are not whole 32-bit words, dense and sparse.
EMU_CASES = [
    (torch.float32, (128,), "dense"), (torch.float32, (3,), "dense"), (torch.float16, (40,), "dense"),
    (torch.bfloat16, (7,), "dense"), (torch.float64, (5,), "dense"), (torch.int64, (33,), "dense"),
    (torch.int8, (13,), "dense"), (torch.uint8, (1,), "dense"), (torch.bool, (100,), "dense"),
    (torch.int16, (9,), "dense"), (torch.int32, (2, 3), "dense"),
    (torch.float32, (300,), "sparse"), (torch.float16, (150,), "sparse"), (torch.int64, (20,), "sparse"),
    (torch.uint8, (77,), "sparse"),
]


@pytest.mark.parametrize("dtype,row_shape,kind", EMU_CASES,
                         ids=[f"{str(d)[6:]}-{'x'.join(map(str, s))}-{k}" for d, s, k in EMU_CASES])
def test_emulated_decode_fitted(emulator, tmp_path, dtype, row_shape, kind):
    seed = new_seed()
    rng = np.random.default_rng(seed)
    n = 45 if np.prod(row_shape) < 200 else 37
    x = adversarial_rows(rng, n, row_shape, dtype) if kind == "dense" else \
        _sparse_rows(rng, n, row_shape, dtype)
    codec = EBPCodec.fit(x, sparse=None if kind == "sparse" else False)
    ct = codec.encode(x)
    out, err = emulator.run(tmp_path, codec, ct)
    assert err == [None, None], f"seed={seed}"
    assert np.array_equal(out, row_bytes(x)), f"seed={seed}"


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_emulated_crafted_tables(emulator, tmp_path, data):
    """Any legal state (splits of 0..W bits, tables with and without escape, 8-bit codes,
    shared tables, odd defaults), decoded through offsets or a fetch, at any alignment."""
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    dtype = data.draw(st.sampled_from([torch.float32, torch.float16, torch.int64, torch.uint8,
                                       torch.int32]), label="dtype")
    shape = data.draw(st.sampled_from([(1,), (5,), (33,), (130,)]), label="shape")
    codec = crafted_codec(rng, dtype, shape, data.draw(st.booleans(), label="sparse"))
    x = rows_for(codec, rng, 40)
    ct = codec.encode(x)
    if data.draw(st.booleans(), label="int64 offsets"):
        ct = dataclasses.replace(ct, offsets=ct.offsets.to(torch.int64))
    fetch = data.draw(st.booleans(), label="fetch")
    index = rng.integers(0, ct.n_rows, 37) if fetch or data.draw(st.booleans()) else None
    pshift = data.draw(st.integers(0, 15), label="payload shift")
    item = x.element_size()
    oshift = item * data.draw(st.integers(0, 3), label="out shift")
    out, err = emulator.run(tmp_path, codec, ct, index, fetch=fetch, payload_shift=pshift,
                            out_shift=oshift)
    assert err == [None, None], f"seed={seed}"
    assert np.array_equal(out, _expect(codec, ct, index)), f"seed={seed}"


@pytest.mark.parametrize("fetch", [False, True])
def test_emulated_bad_index_flagged_and_not_written(emulator, tmp_path, fetch):
    rng = np.random.default_rng(new_seed())
    x = _sparse_rows(rng, 30, (50,), torch.float32)
    codec = EBPCodec.fit(x)
    ct = codec.encode(x)
    index = rng.integers(0, 30, 40)
    index[[5, 9]] = [30, -1]
    out, err = emulator.run(tmp_path, codec, ct, index, fetch=fetch)
    assert err[0] == 5
    rb = codec.row_nbytes
    keep = np.ones(40, bool)
    keep[[5, 9]] = False
    good = index.copy()
    good[~keep] = 0
    want = _expect(codec, ct, good).reshape(40, rb)
    got = out.reshape(40, rb)
    assert np.array_equal(got[keep], want[keep])
    assert (got[~keep] == 0xFF).all(), "a bad index's row is not written"


def test_emulated_decode_flags_corrupt_rows(emulator, tmp_path):
    rng = np.random.default_rng(new_seed())
    x = torch.from_numpy(rng.normal(0, 0.1, (40, 64)).astype(np.float32))
    codec = EBPCodec.fit(x, sparse=False)
    ct = codec.encode(x)
    lengths = ct.row_lengths().numpy()
    rows = np.flatnonzero(lengths < codec.row_nbytes)
    assert len(rows) >= 3
    # 1. one byte fewer: the stream no longer ends in the row's last byte
    r = int(rows[1])
    o = ct.offsets.clone()
    o[r + 1:] -= 1
    p = torch.cat([ct.payload[:int(ct.offsets[r + 1]) - 1], ct.payload[int(ct.offsets[r + 1]):]])
    _, err = emulator.run(tmp_path, codec, dataclasses.replace(ct, offsets=o, payload=p))
    assert err == [None, r]
    # 2. offsets claiming more than a raw row, and past the payload's end
    o = ct.offsets.clone()
    r2 = int(rows[2])
    o[r2 + 1] = o[r2] + codec.row_nbytes + 1
    _, err = emulator.run(tmp_path, codec, dataclasses.replace(ct, offsets=o))
    assert err[1] == r2
    o = ct.offsets.clone()
    o[-1] = ct.payload.numel() + 64
    _, err = emulator.run(tmp_path, codec, dataclasses.replace(ct, offsets=o))
    assert err[1] is not None
    # 3. random bit flips: flagged or decoded to something, never a bad access (ASan)
    for _ in range(5):
        payload = ct.payload.clone()
        k = int(rng.integers(0, int(ct.offsets[-1])))
        payload[k] ^= 1 << int(rng.integers(0, 8))
        emulator.run(tmp_path, codec, dataclasses.replace(ct, payload=payload))
