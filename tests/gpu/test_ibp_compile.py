"""CUDA kernels without a GPU: they compile for sm_80 and sm_90 through the run-time path,
the host-built decode tables scatter bits exactly like pdep, and the kernel source itself
decodes bit for bit when compiled as host C++ under an emulation of warps (threads as
lanes, barriers for __syncwarp/__shfl_*, AddressSanitizer and UBSan watching every access).

The emulation checks the kernels' logic (bit offsets, scan, pdep by runs, staging of rows at
any alignment, truncated last words, store widths, error slots); it cannot check speed,
the memory model, or that the GPU's warp intrinsics behave like the emulated ones. The GPU
tests (tests/gpu/test_ibp_gpu.py, -m gpu) do that on a device.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ibp_graph import gpu
from ibp_graph.codec import EBPCodec, IBPCodec
from ibp_graph.gpu import abi
from ibp_graph.gpu import compiler as cc
from ibp_graph.gpu import ibp as D

from tests.gpu.emulation import (Emulator, assert_bad_offsets_flagged, assert_bad_rows_not_written,
                                 assert_decodes_exactly, compressed_rows, emulator_fixture, expect_rows,
                                 new_seed, row_bytes)

# --------------------------------------------------------------------------- data helpers
# (also imported by tests/gpu/test_ibp_gpu.py)

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.uint8, torch.bool]
#: (total bits, exponent bits) of each float dtype, to build special values bit by bit.
FLOAT_LAYOUT = {torch.float16: (16, 5), torch.bfloat16: (16, 8), torch.float32: (32, 8),
                torch.float64: (64, 11)}
_INT_VIEW = {16: torch.int16, 32: torch.int32, 64: torch.int64}


def adversarial_rows(rng: np.random.Generator, n: int, row_shape: tuple, dtype: torch.dtype,
                     raw_fraction: float = 0.1) -> torch.Tensor:
    """Typical values plus every awkward bit pattern: NaN payloads, -0.0, infinities,
    subnormals, extreme integers, and some rows of uniformly random bits (stored raw)."""
    shape = (n,) + tuple(row_shape)
    size = int(np.prod(shape))
    if dtype == torch.bool:
        return torch.from_numpy(rng.random(shape) < 0.2)
    if dtype.is_floating_point:
        base = rng.normal(0.5, 0.05, size) * (1 + (rng.random(size) < 0.05) * 50)
        t = torch.from_numpy(base).to(dtype)
        bits, ebits = FLOAT_LAYOUT[dtype]
        mbits = bits - 1 - ebits
        iv = t.view(_INT_VIEW[bits])
        sign = -(1 << (bits - 1))  # sign bit as a signed integer
        inf = ((1 << ebits) - 1) << mbits
        pick = rng.random(size)
        mant = rng.integers(1, 1 << min(mbits, 62), size, dtype=np.int64)
        specials = [
            (0.02, torch.from_numpy(inf | mant)),                        # NaN, random payload
            (0.04, torch.from_numpy((inf | mant) + sign)),               # negative NaN
            (0.06, torch.full((size,), sign, dtype=torch.int64)),        # -0.0
            (0.08, torch.full((size,), inf, dtype=torch.int64)),         # +inf
            (0.10, torch.full((size,), inf + sign, dtype=torch.int64)),  # -inf
            (0.12, torch.from_numpy(mant)),                              # subnormal
        ]
        lo = 0.0
        for hi, val in specials:
            sel = torch.from_numpy((pick >= lo) & (pick < hi))
            iv[sel] = val[sel].to(iv.dtype)
            lo = hi
        t = iv.view(dtype).reshape(shape)
    else:
        info = torch.iinfo(dtype)
        centre = rng.integers(max(info.min, -100), min(info.max, 100) + 1)
        vals = centre + rng.integers(-3, 4, size)
        extreme = rng.random(size)
        vals = np.where(extreme < 0.03, info.min, np.where(extreme > 0.97, info.max, vals))
        t = torch.from_numpy(np.clip(vals, info.min, info.max)).to(dtype).reshape(shape)
    t = t.contiguous()
    raw = rng.random(n) < raw_fraction
    if raw.any():
        nbytes = t[0].numel() * t.element_size()
        noise = torch.from_numpy(rng.integers(0, 256, (int(raw.sum()), nbytes), dtype=np.uint8))
        t.view(torch.uint8).reshape(n, -1)[torch.from_numpy(raw)] = noise
    return t


def crafted_codec(rng: np.random.Generator, dtype: torch.dtype, row_shape: tuple, W: int,
                  kind: str) -> IBPCodec:
    """A codec with chosen masks: 'zero' (all bits free), 'ones' (no free bit), 'alt'
    (every other bit free), 'random', or 'mixed' (each column one of those)."""
    row_nbytes = int(np.prod(row_shape)) * torch.empty((), dtype=dtype).element_size()
    n_words = -(-row_nbytes // (W // 8))
    full = (1 << W) - 1
    alt = int("01" * (W // 2), 2)

    def one(k):
        if k == "zero":
            return 0
        if k == "ones":
            return full
        if k == "alt":
            return alt if rng.random() < 0.5 else full ^ alt
        return (int(rng.integers(0, 1 << 32)) | (int(rng.integers(0, 1 << 32)) << 32)) & full

    kinds = ["zero", "ones", "alt", "random"]
    masks = [one(kinds[rng.integers(4)] if kind == "mixed" else kind) & full for _ in range(n_words)]
    mask = np.array(masks, dtype=np.uint64)
    bitval = np.array([m & (int(rng.integers(0, 1 << 32)) | int(rng.integers(0, 1 << 32)) << 32)
                       for m in masks], dtype=np.uint64)
    return IBPCodec(dtype=dtype, row_shape=row_shape, word_bits=W, mask=mask, bitval=bitval)


def rows_for_codec(rng: np.random.Generator, codec: IBPCodec, n: int, p_part: float = 0.8,
                   raw_fraction: float = 0.1) -> torch.Tensor:
    """Rows whose words mostly match the codec's invariant bits (else random: exceptions),
    plus some fully random rows."""
    W, n_words = codec.word_bits, codec.n_words
    full = np.uint64((1 << W) - 1)
    words = rng.integers(0, 1 << 63, (n, n_words), dtype=np.uint64) * np.uint64(2) \
        + rng.integers(0, 2, (n, n_words), dtype=np.uint64)
    words &= full
    part = rng.random((n, n_words)) < p_part
    part[rng.random(n) < raw_fraction] = False
    fitted = (words & ~codec.mask) | codec.bitval
    words = np.where(part, fitted, words)
    wdt = np.uint32 if W == 32 else np.uint64
    raw = np.ascontiguousarray(words.astype(wdt)).view(np.uint8).reshape(n, -1)[:, :codec.row_nbytes]
    buf = torch.from_numpy(np.ascontiguousarray(raw)).reshape(-1)
    if codec.dtype == torch.bool:
        buf = buf & 1
        return buf.view(torch.bool).reshape((n,) + codec.row_shape)
    return buf.view(codec.dtype).reshape((n,) + codec.row_shape)


# --------------------------------------------------------------------------- compilation
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_kernel_compiles(arch):
    names = cc.compile_all(arch)
    assert names == list(abi.KERNEL_SOURCES)
    for source in abi.KERNEL_SOURCES:
        binary = cc.compile_cubin(source, arch)
        assert binary[:4] == b"\x7fELF", "NVRTC should produce a cubin (ELF), not PTX"
        for kernel, entry in abi.KERNELS.items():
            if entry.source == source:
                assert kernel.encode() in binary


@pytest.mark.skipif(cc._nvcc_path() is None, reason="nvcc is not installed here")
def test_kernels_compile_with_nvcc_too():
    binary = cc.compile_cubin("ibp_decode.cu", "sm_90", backend="nvcc")
    assert binary[:4] == b"\x7fELF"
    assert all(k.encode() in binary for k, e in abi.KERNELS.items() if e.source == "ibp_decode.cu")


def test_compile_error_carries_the_log():
    with pytest.raises(gpu.KernelCompileError, match="undefined_thing"):
        cc._compile_nvrtc("broken.cu", 'extern "C" __global__ void k() { undefined_thing(); }',
                          "90", cc.COMPILE_OPTIONS)


def test_arch_spellings():
    assert {cc.normalize_arch(a) for a in ("sm_90", "90", 90, "compute_90", (9, 0))} == {"90"}
    with pytest.raises(ValueError, match="not a CUDA architecture"):
        cc.normalize_arch("hopper")


def test_import_needs_no_cupy():
    code = textwrap.dedent("""
        import sys
        sys.modules['cupy'] = None
        sys.modules['cupy_backends'] = None
        import ibp_graph, ibp_graph.gpu, ibp_graph.gpu.dispatch, ibp_graph.gpu.runtime
        import ibp_graph.codec
        assert ibp_graph.gpu.is_available() is False
        try:
            ibp_graph.gpu.compiler.compile_cubin('ibp_decode.cu', 'sm_90', backend='nvrtc')
        except ibp_graph.gpu.CudaUnavailableError as e:
            assert 'cupy' in str(e).lower()
        else:
            raise AssertionError('compiling without cupy should fail clearly')
    """)
    subprocess.run([sys.executable, "-c", code], check=True)


def test_launch_parameters_pack_exactly():
    """The driver reads each argument at its declared C width, in the declared order, however
    the caller ordered the names; a missing or unknown name raises before any launch."""
    import ctypes

    block = abi.ParamBlock(("p", "const u8*"), ("a", "int"), ("b", "int"), ("n", "i64"),
                           ("q", "u64*"))
    args = {"n": 2**40 + 3, "q": 0, "a": 1, "p": 0xDEADBEEF0000, "b": -7}
    values, params = block.pack(args)
    assert [ctypes.sizeof(v) for v in values] == [8, 4, 4, 8, 8]
    read = [ctypes.cast(params[k], ctypes.POINTER(p.ctypes_type)).contents.value
            for k, p in enumerate(block.params)]
    assert read == [0xDEADBEEF0000, 1, -7, 2**40 + 3, 0]
    with pytest.raises(TypeError, match=r"missing \['b'\]"):
        block.pack({k: v for k, v in args.items() if k != "b"})
    with pytest.raises(TypeError, match=r"not parameters \['c'\]"):
        block.pack(dict(args, c=3))
    with pytest.raises(ValueError, match="C type 'float'"):
        abi.ParamBlock(("x", "float"))


@pytest.mark.parametrize("codec_cls", [IBPCodec, EBPCodec])
def test_host_checks_need_no_gpu(codec_cls):
    """Argument errors are raised before any GPU work, naming the argument."""
    x = torch.randn(20, 8)
    codec = codec_cls.fit(x)
    ct = codec.encode(x)
    with pytest.raises(TypeError, match=r"ct must be a CompressedTensor"):
        gpu.decode(codec, ct.payload)
    with pytest.raises(TypeError, match=r"index has dtype=torch\.int32.*int64"):
        gpu.fetch(codec, ct, torch.zeros(3, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"index must be a torch\.Tensor"):
        gpu.gather_raw_rows(x, [1, 2])
    with pytest.raises(TypeError, match=r"codec must be an IBPCodec, EBPCodec or IdentityCodec"):
        gpu.decode(object(), ct)
    if not torch.cuda.is_available():
        with pytest.raises(gpu.CudaUnavailableError, match="no CUDA device"):
            gpu.fetch(codec, ct, torch.zeros(3, dtype=torch.int64))
        with pytest.raises(gpu.CudaUnavailableError, match="no CUDA device"):
            gpu.decode(codec, ct)


def test_bench_script_builds_tables(tmp_path):
    """scripts/bench_gpu.py --dry-run: tiled compressed tables decode to the tiled raw rows."""
    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "bench_gpu.py")
    proc = subprocess.run([sys.executable, script, "--dry-run", "--families",
                           "embedding_f16,node_ids_i64", "--table-rows", "6000",
                           "--base-rows", "2048"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "embedding_f16" in proc.stdout and "node_ids_i64" in proc.stdout


# --------------------------------------------------------------------------- decode tables
def _free_bits(mask: int, W: int) -> list[int]:
    """The positions of mask's zero bits (of W), ascending."""
    return [b for b in range(W) if not (mask >> b) & 1]


def py_pdep(c: int, mask: int, W: int) -> int:
    """Reference pdep: the low bits of c, in order, into the zero bits of mask."""
    return sum(((c >> k) & 1) << b for k, b in enumerate(_free_bits(mask, W)))


def py_pext(x: int, mask: int, W: int) -> int:
    """Reference pext: the bits of x where mask is 0, compacted."""
    return sum(((x >> b) & 1) << k for k, b in enumerate(_free_bits(mask, W)))


def table_pdep(v: int, col: np.ndarray, runs: np.ndarray, W: int) -> int:
    """What the kernel computes from one column's table entry (ibp_pdep)."""
    x = int(col["bitval_lo"]) | (int(col["bitval_hi"]) << 32)
    z = int(col["widths"])
    nr = (z >> 8) & 0xFF
    if nr:
        r0 = z >> 16
        s, ln = r0 & 0x3F, (r0 >> 6) & 0x7F
        x |= (v & ((1 << ln) - 1)) << s
        for k in range(1, nr):
            rr = int(runs[int(col["runs_at"]) + k - 1])
            s, ln, src = rr & 0xFF, (rr >> 8) & 0xFF, rr >> 16
            x |= ((v >> src) & ((1 << ln) - 1)) << s
    return x & ((1 << W) - 1)


def _special_masks(W):
    full = (1 << W) - 1
    alt = int("01" * (W // 2), 2)
    return [0, full, alt, full ^ alt, 1, 1 << (W - 1), full ^ 1, full ^ (1 << (W - 1)),
            0xFF00FF00 & full, (full >> (W // 2)) << (W // 2)]


def _check_tables(masks, W, rng):
    masks = [m & ((1 << W) - 1) for m in masks]
    bitvals = [m & int(rng.integers(0, 1 << 62)) * 3 for m in masks]
    cols, runs = D.build_decode_tables(np.array(masks, dtype=np.uint64),
                                       np.array(bitvals, dtype=np.uint64), W)
    assert cols.shape == (len(masks),) and cols.dtype == abi.IBP_COLUMN and runs.dtype == np.uint32
    assert cols.itemsize == 16  # one 16-byte load per column in the kernel
    for j, (m, bv) in enumerate(zip(masks, bitvals)):
        free = W - bin(m).count("1")
        assert int(cols[j]["widths"]) & 0xFF == free
        assert ((int(cols[j]["widths"]) >> 8) & 0xFF) == len(D.free_bit_runs(m, W))
        for _ in range(6):
            x = int(rng.integers(0, 1 << 62)) * 5 & ((1 << W) - 1)
            c = py_pext(x, m, W)
            assert c < (1 << free) if free < W else True
            assert table_pdep(c, cols[j], runs, W) == py_pdep(c, m, W) | bv
            # round trip: decoding the compacted free bits of a matching word gives it back
            word = (x & ~m) | bv
            assert table_pdep(py_pext(word, m, W), cols[j], runs, W) == word


@pytest.mark.parametrize("W", [32, 64])
def test_tables_special_masks(W):
    _check_tables(_special_masks(W), W, np.random.default_rng(1))


@pytest.mark.parametrize("W", [32, 64])
@settings(max_examples=60, deadline=None)
@given(masks=st.lists(st.integers(min_value=0, max_value=2**64 - 1), min_size=1, max_size=12),
       seed=st.integers(0, 2**32 - 1))
def test_tables_random_masks(W, masks, seed):
    _check_tables(masks, W, np.random.default_rng(seed))


def test_free_bit_runs_and_bad_input():
    rng = np.random.default_rng(0)
    for W in (32, 64):
        for m in _special_masks(W) + [int(rng.integers(0, 1 << 62)) & ((1 << W) - 1) for _ in range(50)]:
            runs = D.free_bit_runs(m, W)
            covered = [b for s, n in runs for b in range(s, s + n)]
            assert covered == [b for b in range(W) if not (m >> b) & 1]  # ascending, exact
            assert all(s2 > s1 + n1 for (s1, n1), (s2, _) in zip(runs, runs[1:]))  # maximal
    with pytest.raises(ValueError, match="word_bits"):
        D.build_decode_tables(np.zeros(1, np.uint64), np.zeros(1, np.uint64), 16)
    with pytest.raises(ValueError, match="above bit 31"):
        D.build_decode_tables(np.array([1 << 40], np.uint64), np.zeros(1, np.uint64), 32)


def test_launch_shape_helpers():
    assert [D.group_size(n) for n in (0, 1, 2, 3, 5, 16, 17, 32, 33, 4000)] == \
        [1, 1, 2, 4, 8, 16, 32, 32, 32, 32]
    for rb in (1, 7, 8, 512, 12000):
        cap = D.stage_bytes(rb)
        # staged blocks (<= rb + 30 bytes) and 3-word reads past the row end fit
        assert cap % 16 == 0 and cap >= rb + 30 and cap >= rb + 27
    assert D.store_unit(8, 512, 256) == 8
    assert D.store_unit(8, 12, 256) == 4
    assert D.store_unit(4, 6, 256) == 2
    assert D.store_unit(4, 512, 3) == 1


# --------------------------------------------------------------------------- warp emulation
HARNESS = r"""
#include "shim.h"
#include "ibp_decode.cu"
#include "harness.h"
alignas(16) uint4 ibp_smem[1 << 16];  // 1 MiB of "shared memory"
typedef void (*decode_fn)(const u8*, const void*, int, const i64*, i64, i64, i64, const IbpColumn*,
                          const u32*, int, int, int, int, int, u8*, u64*);
typedef void (*gather_fn)(const u8*, i64, i64, const i64*, i64, int, u8*, u64*);
static int run_case(const std::string& dir) {
  std::ifstream pf(dir + "/params.txt");
  std::string kernel;
  long W, G, n_out, n_rows, payload_nbytes, payload_shift, off64, has_index, n_words, row_nbytes,
      header_bits, store_unit, cap, out_shift, block, grid, lanes;
  pf >> kernel >> W >> G >> n_out >> n_rows >> payload_nbytes >> payload_shift >> off64 >> has_index
     >> n_words >> row_nbytes >> header_bits >> store_unit >> cap >> out_shift >> block >> grid >> lanes;
  const u8* payload_p = place_payload(slurp(dir + "/payload.bin"), payload_shift);
  auto offsets = exact<void>(slurp(dir + "/offsets.bin"));
  auto index_v = slurp(dir + "/index.bin");
  i64* index_p = has_index ? exact<i64>(index_v) : nullptr;
  auto cols = exact<IbpColumn>(slurp(dir + "/cols.bin"));
  auto runs = exact<u32>(slurp(dir + "/runs.bin"));
  EmuOutput o = poisoned_output(n_out * row_nbytes, out_shift);
  u8* out = o.data();
  u64 err[2] = {~0ull, ~0ull};
  decode_fn dfn = nullptr;
  gather_fn gfn = nullptr;
#define D(w, g) if (kernel == "ibp_decode_w" #w "_g" #g) dfn = ibp_decode_w##w##_g##g;
  D(32, 1) D(32, 2) D(32, 4) D(32, 8) D(32, 16) D(32, 32) D(64, 1) D(64, 2) D(64, 4) D(64, 8) D(64, 16) D(64, 32)
#define GA(v) if (kernel == "ibp_gather_v" #v) gfn = ibp_gather_v##v;
  GA(1) GA(2) GA(4) GA(8) GA(16)
  if (!dfn && !gfn) { std::fprintf(stderr, "unknown kernel %s\n", kernel.c_str()); return 2; }
  if (dfn && (block / G) * cap > (long)sizeof(ibp_smem)) { std::fprintf(stderr, "smem too small\n"); return 2; }
  emu_launch(grid, block, (int)(dfn ? G : 32), ibp_smem, sizeof(ibp_smem), [&] {
    if (dfn)
      dfn(payload_p, offsets, (int)off64, index_p, n_out, n_rows, payload_nbytes, cols, runs,
          (int)n_words, (int)row_nbytes, (int)header_bits, (int)store_unit, (int)cap, out, err);
    else
      gfn(payload_p, n_rows, row_nbytes, index_p, n_out, (int)lanes, out, err);
  });
  return emu_finish(dir, o, err);
}
"""


class IbpEmulator(Emulator):
    """The IBP decode and raw gather kernels, launched as ibp_graph.gpu would launch them."""

    def decode(self, tmp, codec, ct, index=None, **shapes):
        """Launch ibp_decode_w*_g* with the shapes ibp_graph.gpu.ibp would pick."""
        return self.launch(str(tmp), *self.decode_inputs(codec, ct, index, **shapes))

    @staticmethod
    def decode_inputs(codec, ct, index=None, *, payload_shift=0, out_shift=0, block=64, grid=2):
        """(params, arrays) of that launch (Emulator.launch, launch_many)."""
        tabs = D.host_tables(codec)  # what the runtime uploads
        W, n_words, rb = tabs.word_bits, tabs.n_words, tabs.row_nbytes
        G = D.group_size(n_words)
        n_out = ct.n_rows if index is None else len(index)
        idx = np.zeros(0, np.int64) if index is None else np.asarray(index, dtype=np.int64)
        params = [f"ibp_decode_w{W}_g{G}", W, G, n_out, ct.n_rows, ct.payload.numel(),
                  payload_shift, ct.offsets.dtype == torch.int64, index is not None, n_words, rb,
                  tabs.header_bits, D.store_unit(W // 8, rb, out_shift), D.stage_bytes(rb),
                  out_shift, block, grid, 0]
        return params, {"payload": ct.payload.numpy(), "offsets": ct.offsets.numpy(), "index": idx,
                        "cols": tabs.cols, "runs": tabs.runs}

    def gather(self, tmp, table: np.ndarray, index, **shapes):
        """Launch ibp_gather_v* with the shapes ibp_graph.gpu.gather_raw_rows would pick."""
        return self.launch(str(tmp), *self.gather_inputs(table, index, **shapes))

    @staticmethod
    def gather_inputs(table: np.ndarray, index, *, table_shift=0, out_shift=0, block=64, grid=2):
        """(params, arrays) of that launch (Emulator.launch, launch_many)."""
        n_rows, rb = table.shape
        vw = next(v for v in (16, 8, 4, 2, 1)
                  if rb % v == 0 and table_shift % v == 0 and out_shift % v == 0)
        lanes = D.group_size(rb // vw)
        idx = np.asarray(index, dtype=np.int64)
        params = [f"ibp_gather_v{vw}", 0, 0, len(idx), n_rows, table.size, table_shift, 0, 1, 0,
                  rb, 0, 0, 0, out_shift, block, grid, lanes]
        return params, {"payload": table.reshape(-1), "offsets": np.zeros(1, np.int32), "index": idx,
                        "cols": np.zeros(1, abi.IBP_COLUMN), "runs": np.zeros(1, np.uint32)}


emulator = emulator_fixture(IbpEmulator, "emu", HARNESS, abi.KERNEL_SOURCES)


# Row shapes chosen to hit every group size (1..32 lanes) and rows that are not a whole
# number of words.
EMU_CASES = [
    (torch.float32, (128,), 32), (torch.float32, (128,), 64), (torch.float32, (1,), 32),
    (torch.float32, (3,), 64), (torch.float16, (3,), 32), (torch.float16, (40,), 64),
    (torch.bfloat16, (7,), 32), (torch.float64, (5,), 64), (torch.float64, (5,), 32),
    (torch.int8, (7,), 32), (torch.int8, (13,), 64), (torch.int16, (9,), 32),
    (torch.int32, (2, 3), 64), (torch.int64, (1,), 64), (torch.int64, (33,), 32),
    (torch.uint8, (1,), 32), (torch.uint8, (61,), 64), (torch.bool, (13,), 32),
    (torch.bool, (100,), 64),
]


@pytest.mark.parametrize("dtype,row_shape,W", EMU_CASES,
                         ids=[f"{str(d)[6:]}-{'x'.join(map(str, s))}-w{w}" for d, s, w in EMU_CASES])
def test_emulated_decode_fitted(emulator, tmp_path, dtype, row_shape, W):
    seed = new_seed()
    rng = np.random.default_rng(seed)
    x = adversarial_rows(rng, 37, row_shape, dtype)
    codec = IBPCodec.fit(x, word_bits=W)
    ct = codec.encode(x)
    assert np.array_equal(expect_rows(codec, ct), row_bytes(x))
    assert_decodes_exactly(emulator.decode(tmp_path, codec, ct), x, f"seed={seed}")


@pytest.mark.parametrize("kind", ["zero", "ones", "alt", "random", "mixed"])
@pytest.mark.parametrize("W", [32, 64])
def test_emulated_decode_crafted_masks(emulator, tmp_path, kind, W):
    seed = new_seed()
    rng = np.random.default_rng(seed)
    for dtype, shape in [(torch.int32, (40,)), (torch.uint8, (11,)), (torch.float16, (6,))]:
        codec = crafted_codec(rng, dtype, shape, W, kind)
        x = rows_for_codec(rng, codec, 29)
        ct = codec.encode(x)
        assert_decodes_exactly(emulator.decode(tmp_path, codec, ct), x, f"seed={seed} {dtype} {shape}")


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_emulated_fetch_any_alignment(emulator, tmp_path, data):
    """Gather + decode of random rows, payload at any byte alignment, out at any store width,
    int32 or int64 offsets, and a bad index flagged without touching its row."""
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    dtype, shape, W = EMU_CASES[data.draw(st.integers(0, len(EMU_CASES) - 1), label="case")]
    x = adversarial_rows(rng, 23, shape, dtype, raw_fraction=0.2)
    codec = IBPCodec.fit(x, word_bits=W)
    ct = codec.encode(x)
    if data.draw(st.booleans(), label="int64 offsets"):
        ct = dataclasses.replace(ct, offsets=ct.offsets.to(torch.int64))
    index = rng.integers(0, ct.n_rows, 31)
    pshift = data.draw(st.integers(0, 15), label="payload shift")
    oshift = data.draw(st.sampled_from([0, 1, 2, 4]), label="out shift")
    out, err = emulator.decode(tmp_path, codec, ct, index, payload_shift=pshift, out_shift=oshift)
    assert err == [None, None]
    assert np.array_equal(out, expect_rows(codec, ct, index))
    bad = index.copy()
    bad[[5, 9]] = [ct.n_rows, -1]
    out, err = emulator.decode(tmp_path, codec, ct, bad, payload_shift=pshift, out_shift=oshift)
    assert err == [5, None]
    assert_bad_rows_not_written(out, expect_rows(codec, ct, index), [5, 9], codec.row_nbytes)


def test_emulated_decode_flags_corrupt_rows(emulator, tmp_path):
    rng = np.random.default_rng(new_seed())
    x = adversarial_rows(rng, 16, (64,), torch.float32, raw_fraction=0.0)
    codec = IBPCodec.fit(x, word_bits=32)
    ct = codec.encode(x)
    rows = compressed_rows(codec, ct)
    # 1. a flipped participation bit changes the stream length: the row no longer adds up
    r = int(rows[1])
    payload = ct.payload.clone()
    o = int(ct.offsets[r])
    # a column whose width changes by >= 8 bits with its participation, so the byte count must
    j = next(j for j in range(codec.n_words) if 32 - codec.free_bits[j] >= 8)
    payload[o + j // 8] ^= 1 << (j % 8)
    bad = dataclasses.replace(ct, payload=payload)
    _, err = emulator.decode(tmp_path, codec, bad)
    assert err == [None, r]
    # 2. offsets claiming more bytes than a raw row; 3. offsets past the end of the payload
    assert_bad_offsets_flagged(lambda bad: emulator.decode(tmp_path, codec, bad), codec, ct, int(rows[2]))


@pytest.mark.parametrize("row_nbytes,table_shift,out_shift",
                         [(512, 0, 0), (64, 0, 8), (6, 0, 2), (7, 3, 1), (1, 0, 0), (12000, 4, 4)])
def test_emulated_raw_gather(emulator, tmp_path, row_nbytes, table_shift, out_shift):
    rng = np.random.default_rng(new_seed())
    n = 9 if row_nbytes > 4096 else 50
    table = rng.integers(0, 256, (n, row_nbytes), dtype=np.uint8)
    index = rng.integers(0, n, 40)
    out, err = emulator.gather(tmp_path, table, index, table_shift=table_shift, out_shift=out_shift)
    assert err == [None, None]
    assert np.array_equal(out.reshape(len(index), row_nbytes), table[index])
    index[[3, 7]] = [n + 5, -2]
    out, err = emulator.gather(tmp_path, table, index, table_shift=table_shift, out_shift=out_shift)
    assert err[0] == 3
