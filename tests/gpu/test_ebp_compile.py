"""EBP CUDA kernels without a GPU: they compile for sm_80 and sm_90 through the run-time path,
the host passes exactly the kernels' parameters, and the kernel source decodes bit for bit
when compiled as host C++ under the warp emulation of tests/gpu/emulation.py (threads as
lanes, barriers for the warp intrinsics, AddressSanitizer and UBSan on every access); a row's
header alone (ebp_row_header) is checked at bit positions past 2**32, which no emulated row
could reach. The host checks that need no GPU are tests/gpu/test_ibp_compile.py's, for both
codecs.

What the emulation cannot check: speed, the memory model, that the GPU's intrinsics behave
like the emulated ones, and zero-copy reads of pinned memory (the gather kernel runs here on
ordinary host memory). tests/gpu/test_ibp_gpu.py-style GPU tests must do that on a device.
"""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ibp_graph.codec import EBPCodec
from ibp_graph.gpu import abi
from ibp_graph.gpu import compiler as cc
from ibp_graph.gpu import ebp as E

from tests.codec.test_ebp import crafted_codec, rows_for
from tests.gpu.emulation import (Emulator, assert_bad_offsets_flagged, assert_bad_rows_not_written,
                                 assert_decodes_exactly, compressed_rows, emulator_fixture, expect_rows,
                                 new_seed)
from tests.gpu.test_ibp_compile import adversarial_rows

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


def test_rows_past_the_decoders_32_bit_positions_are_refused():
    """The decoder's bit positions past a row's header are 32-bit: rows wider than
    abi.EBP_MAX_ROW_NBYTES are refused when the tables are built, before any launch."""
    codec = EBPCodec.fit(torch.randn(50, 8))

    def as_wide(row_nbytes):  # the codec's tables, rows said to be row_nbytes wide
        return SimpleNamespace(word_bits=codec.word_bits, tables=codec.tables, row_nbytes=row_nbytes)

    assert E.host_tables(as_wide(abi.EBP_MAX_ROW_NBYTES)).d == 8
    with pytest.raises(ValueError, match=rf"rows of {abi.EBP_MAX_ROW_NBYTES + 4} bytes are too wide "
                                         rf"for the GPU decoder .*accepted: rows up to "
                                         rf"{abi.EBP_MAX_ROW_NBYTES} bytes"):
        E.host_tables(as_wide(abi.EBP_MAX_ROW_NBYTES + 4))


# --------------------------------------------------------------------------- warp emulation
HARNESS = r"""
#include "shim.h"
#include "ebp_decode.cu"
#include "harness.h"
typedef void (*decode_fn)(const u8*, const void*, int, const i64*, const i64*, const int*, i64, i64,
                          i64, const EbpColumn*, const u64*, const u16*, const u64*, int, int, int, int,
                          int, int, int, u8*, u64*);
static void* alloc16(long size) { return std::aligned_alloc(16, (size + 15) / 16 * 16); }
static int run_case(const std::string& dir) {
  std::ifstream pf(dir + "/params.txt");
  long W, fetch, n_out, n_rows, payload_shift, off64, has_index, d, row_nbytes, sparse, HE, LS, IB,
      low_total, out_shift, block, grid, stride;
  pf >> W >> fetch >> n_out >> n_rows >> payload_shift >> off64 >> has_index >> d >> row_nbytes >>
      sparse >> HE >> LS >> IB >> low_total >> out_shift >> block >> grid >> stride;
  auto payload = slurp(dir + "/payload.bin");
  const u8* payload_p = place_payload(payload, payload_shift);
  auto offsets = exact<void>(slurp(dir + "/offsets.bin"));
  auto index_v = slurp(dir + "/index.bin");
  i64* index_p = has_index ? exact<i64>(index_v) : nullptr;
  auto colinfo = exact<EbpColumn>(slurp(dir + "/colinfo.bin"));
  auto defaults = exact<u64>(slurp(dir + "/defaults.bin"));
  auto dlut = exact<u16>(slurp(dir + "/dlut.bin"));
  auto dict = exact<u64>(slurp(dir + "/dict.bin"));
  EmuOutput o = poisoned_output(n_out * row_nbytes, out_shift);
  u8* out = o.data();
  u64 err[2] = {~0ull, ~0ull};
  decode_fn dfn = W == 8 ? ebp_decode_w8 : W == 16 ? ebp_decode_w16 : W == 32 ? ebp_decode_w32
                                                                              : ebp_decode_w64;
  if (!fetch) {
    emu_launch(grid, block, 32, ebp_sym, sizeof(ebp_sym), [&] {
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
    emu_launch(grid, block, 32, ebp_sym, sizeof(ebp_sym), [&] {
      ebp_gather(payload_p, offsets, (int)off64, index_p, n_out, n_rows, (i64)payload.size(),
                 (int)row_nbytes, stride, scratch, starts, lens, err);
    });
    emu_launch(grid, block, 32, ebp_sym, sizeof(ebp_sym), [&] {
      dfn(scratch, nullptr, 0, index_p, starts, lens, n_out, n_rows, n_out * stride + 16, colinfo,
          defaults, dlut, dict, (int)d, (int)row_nbytes, (int)sparse, (int)HE, (int)LS, (int)IB,
          (int)low_total, out, err);
    });
  }
  return emu_finish(dir, o, err);
}
"""


class EbpEmulator(Emulator):
    """Runs the decode (or the gather + decode of a fetch) on the host: output bytes, error slots."""

    def run(self, tmp, codec, ct, index=None, **shapes):
        return self.launch(str(tmp), *self.run_inputs(codec, ct, index, **shapes), timeout=600)

    @staticmethod
    def run_inputs(codec, ct, index=None, *, fetch=False, payload_shift=0, out_shift=0, block=64,
                   grid=2):
        """(params, arrays) of that launch (Emulator.launch, launch_many)."""
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
        return params, arrays


emulator = emulator_fixture(EbpEmulator, "ebp_emu", HARNESS, ("ebp_decode.cu",))


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
    assert_decodes_exactly(emulator.run(tmp_path, codec, ct), x, f"seed={seed}")


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
    assert np.array_equal(out, expect_rows(codec, ct, index)), f"seed={seed}"


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
    good = index.copy()
    good[[5, 9]] = 0
    assert_bad_rows_not_written(out, expect_rows(codec, ct, good), [5, 9], codec.row_nbytes)


def test_emulated_decode_flags_corrupt_rows(emulator, tmp_path):
    rng = np.random.default_rng(new_seed())
    x = torch.from_numpy(rng.normal(0, 0.1, (40, 64)).astype(np.float32))
    codec = EBPCodec.fit(x, sparse=False)
    ct = codec.encode(x)
    rows = compressed_rows(codec, ct)
    # 1. one byte fewer: the stream no longer ends in the row's last byte
    r = int(rows[1])
    o = ct.offsets.clone()
    o[r + 1:] -= 1
    p = torch.cat([ct.payload[:int(ct.offsets[r + 1]) - 1], ct.payload[int(ct.offsets[r + 1]):]])
    _, err = emulator.run(tmp_path, codec, dataclasses.replace(ct, offsets=o, payload=p))
    assert err == [None, r]
    # 2. offsets claiming more than a raw row, and past the payload's end
    assert_bad_offsets_flagged(lambda bad: emulator.run(tmp_path, codec, bad), codec, ct, int(rows[2]))
    # 3. random bit flips: flagged or decoded to something, never a bad access (ASan)
    for _ in range(5):
        payload = ct.payload.clone()
        k = int(rng.integers(0, int(ct.offsets[-1])))
        payload[k] ^= 1 << int(rng.integers(0, 8))
        emulator.run(tmp_path, codec, dataclasses.replace(ct, payload=payload))


# --------------------------------------------------------------------------- row headers
HEADER_HARNESS = r"""
#include "shim.h"
#include "ebp_decode.cu"
#include "harness.h"
// One row header parsed by ebp_row_header (one lane, no warp): out.bin gets ok, mode, count,
// ne, low_start, esc_start, pos_start and pc as u64s.
static int run_case(const std::string& dir) {
  std::ifstream pf(dir + "/params.txt");
  long sh, L, sparse, d, HE, LS, IB, HS, low_total;
  pf >> sh >> L >> sparse >> d >> HE >> LS >> IB >> HS >> low_total;
  const u32* w = exact<u32>(slurp(dir + "/words.bin"));
  const u32 qmax = (u32)((sh / 8 + L - 1) >> 2);  // as ebp_decode_impl: (a3 + L - 1) >> 2
  EbpRowHeader h;
  const bool ok = ebp_row_header(w, qmax, (u32)sh, (u32)L, (int)sparse, (u32)d, (u32)HE, (u32)LS,
                                 (u32)IB, (u32)HS, (u32)low_total, &h);
  const u64 got[8] = {ok, h.mode, h.count, h.ne, h.low_start, h.esc_start, h.pos_start, h.pc};
  std::ofstream(dir + "/out.bin", std::ios::binary).write((const char*)got, sizeof got);
  const u64 err[2] = {~0ull, ~0ull};
  std::ofstream(dir + "/err.bin", std::ios::binary).write((const char*)err, sizeof err);
  return 0;
}
"""

header_emulator = emulator_fixture(Emulator, "ebp_header_emu", HEADER_HARNESS, ("ebp_decode.cu",))


def _gamma(n: int) -> list[tuple[int, int]]:
    """The Elias-gamma code of n >= 1 as (value, bits) fields of the LSB-first stream."""
    z = n.bit_length() - 1
    return [(1 << z, z + 1), (n & ((1 << z) - 1), z)]


def _header(header_emulator, tmp_path, fields, *, sh, L, sparse, d, HE=0, LS=0, IB=0, HS=0,
            low_total=0, ones=()):
    """ebp_row_header on a row of L bytes starting at bit sh whose stream holds `fields` (then
    zeros; stream bits `ones` set): {ok, mode, count, ne, low_start, esc_start, pos_start, pc}."""
    stream, at = 0, sh
    for value, bits in fields:
        stream |= value << at
        at += bits
    for bit in ones:
        stream |= 1 << bit
    n_words = (sh // 8 + L - 1) // 4 + 3  # the row's words, then the two the decoder reads past them
    words = np.frombuffer(stream.to_bytes(4 * n_words, "little"), dtype=np.uint32)
    out, _ = header_emulator.launch(tmp_path, [sh, L, int(sparse), d, HE, LS, IB, HS, low_total],
                                    {"words": words})
    names = ("ok", "mode", "count", "ne", "low_start", "esc_start", "pos_start", "pc")
    return dict(zip(names, (int(v) for v in out.view(np.uint64))))


def test_row_header_positions_are_64_bit_and_start_inside_the_row(header_emulator, tmp_path):
    """A damaged sparse header (a row of an 8-bit codec with d = 2**27 columns) whose counts put
    its code stream 2**32 + 139 bits in: exact 64-bit positions, and refused since the stream
    would start past the row's end. 32-bit positions wrapped it to bit 139, inside the row."""
    sh, L, d, IB, LS, HS = 8, 64, 2**27, 27, 4, 4
    count = ne = 122_713_352  # count * (IB + LS + HS) = 2**32 + 24
    got = _header(header_emulator, tmp_path, [(1, 1)] + _gamma(count + 1) + _gamma(ne + 1), sh=sh,
                  L=L, sparse=True, d=d, IB=IB, LS=LS, HS=HS)
    pos = sh + 1 + 2 * 53
    want = dict(ok=0, mode=1, count=count, ne=ne, pos_start=pos, low_start=pos + count * IB,
                esc_start=pos + count * (IB + LS), pc=pos + count * (IB + LS + HS))
    assert got == want and want["pc"] == 2**32 + 139
    assert want["pc"] % 2**32 <= sh + 8 * L  # what 32-bit positions made of it: inside the row

    # a sound sparse header: 5 listed columns, 2 escapes
    got = _header(header_emulator, tmp_path, [(1, 1)] + _gamma(6) + _gamma(3), sh=sh, L=L,
                  sparse=True, d=d, IB=IB, LS=LS, HS=HS)
    pos = sh + 1 + 5 + 3
    assert got == dict(ok=1, mode=1, count=5, ne=2, pos_start=pos, low_start=pos + 5 * IB,
                       esc_start=pos + 5 * (IB + LS), pc=pos + 5 * (IB + LS) + 2 * HS)


def test_row_header_code_stream_must_start_by_the_rows_last_bit(header_emulator, tmp_path):
    """Dense rows (d = 1000, W = 8): a code stream starting exactly at the row's end is taken
    (a row of no codes past it), one bit later refused; as are escapes that run past the row."""
    sh, L = 16, 64
    end = sh + 8 * L
    for low_total, ok in [(end - sh - 1, 1), (end - sh, 0)]:  # gamma(1) = one bit, then pc
        got = _header(header_emulator, tmp_path, [], sh=sh, L=L, sparse=False, d=1000, HE=8,
                      low_total=low_total, ones=(end - 1, end))
        assert got == dict(ok=ok, mode=0, count=1000, ne=0, pos_start=0, low_start=sh,
                           esc_start=sh + low_total + 1, pc=sh + low_total + 1)
    got = _header(header_emulator, tmp_path, _gamma(1000), sh=sh, L=L, sparse=False, d=1000, HE=8)
    assert got["ok"] == 0 and got["ne"] == 999 and got["pc"] == sh + 19 + 999 * 8
