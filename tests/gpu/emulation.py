"""The warp emulation the kernel tests run the CUDA sources under, on the host (tests only).

A kernel source compiles as host C++ with a shim for the CUDA features it uses (threads as
lanes, barriers for the warp intrinsics: a mask that does not name the caller's group of
lanes is an error), and a harness per kernel family reads its inputs from a folder, runs one
launch, checks that nothing was written outside the output and writes the output bytes and
the error slots back, for each folder named on its command line (AddressSanitizer and UBSan
watch every access when the toolchain has them; inputs get allocations of exactly their
size). tests/gpu/test_ibp_compile.py, test_ebp_compile.py and test_emulated_bounds.py use it.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from ibp_graph.gpu import compiler as cc


def new_seed() -> int:
    """A fresh seed per run (printed by the tests that use it, to replay a failure)."""
    return int.from_bytes(os.urandom(4), "little")


def row_bytes(t: torch.Tensor) -> np.ndarray:
    """The bytes of a CPU tensor, flat (bit-exact comparison, NaNs included)."""
    t = t.detach().cpu().contiguous().reshape(-1)
    if t.dtype == torch.bool:
        t = t.view(torch.uint8)
    return t.view(torch.uint8).numpy().copy()


def expect_rows(codec, ct, index=None) -> np.ndarray:
    """The bytes the CPU decoder gives for `ct` (rows `index` of it, if given)."""
    ref = codec.decode(ct)
    if index is not None:
        ref = ref[torch.as_tensor(np.asarray(index), dtype=torch.int64)]
    return row_bytes(ref)


def assert_decodes_exactly(result, x: torch.Tensor, context: str) -> None:
    """An emulated launch's (output bytes, error slots): no error slot set, the output is x's
    bytes; `context` (the seed, the case) names a failure."""
    out, err = result
    assert err == [None, None], context
    assert np.array_equal(out, row_bytes(x)), context


def compressed_rows(codec, ct) -> np.ndarray:
    """The table rows `ct` stores compressed (shorter than a raw row); at least three of them."""
    rows = np.flatnonzero(ct.row_lengths().numpy() < codec.row_nbytes)
    assert len(rows) >= 3
    return rows


def assert_bad_offsets_flagged(decode, codec, ct, row: int) -> None:
    """`decode(ct)` is one emulated launch, (output bytes, error slots): offsets by which table
    row `row` claims a byte more than a raw row flag that row corrupt; a last offset 64 bytes
    past the payload's end flags some row."""
    too_long = ct.offsets.clone()
    too_long[row + 1] = too_long[row] + codec.row_nbytes + 1
    _, err = decode(dataclasses.replace(ct, offsets=too_long))
    assert err[1] == row
    past_end = ct.offsets.clone()
    past_end[-1] = ct.payload.numel() + 64
    _, err = decode(dataclasses.replace(ct, offsets=past_end))
    assert err[1] is not None


def assert_bad_rows_not_written(out: np.ndarray, want: np.ndarray, bad, row_nbytes: int) -> None:
    """Output rows at positions `bad` (a bad index's) keep the harness's 0xFF poison; every
    other row equals `want`'s."""
    got = out.reshape(-1, row_nbytes)
    keep = np.ones(len(got), bool)
    keep[list(bad)] = False
    assert np.array_equal(got[keep], want.reshape(-1, row_nbytes)[keep])
    assert (got[~keep] == 0xFF).all(), "a bad index's row is not written"


# --------------------------------------------------------------------------- C++ side
SHIM = r"""
// Host emulation of the CUDA features the kernels use (tests only).
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
struct emu_dim3 { unsigned x, y, z; };
thread_local emu_dim3 threadIdx;
emu_dim3 blockIdx, blockDim, gridDim;
#define __device__
#define __global__
#define __shared__
#define __forceinline__ inline
#define __launch_bounds__(n)
template <class T> static inline T __ldg(const T* p) { return *p; }
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
  return (unsigned)((((unsigned long long)hi << 32) | lo) >> (s & 31u));
}
static std::mutex emu_atomic_mutex;
static inline unsigned long long atomicMin(unsigned long long* a, unsigned long long v) {
  std::lock_guard<std::mutex> g(emu_atomic_mutex);
  unsigned long long old = *a;
  if (v < old) *a = v;
  return old;
}
// Every group of lanes a mask names syncs on its own barrier: a lane outside the group,
// a mask that is not exactly the caller's group, or a missing lane (deadlock, caught by
// the test's timeout) is an error, as it would be undefined behaviour on the GPU.
static int emu_group = 32;
static std::vector<std::unique_ptr<std::barrier<>>> emu_bars;
static void emu_fail(const char* what) {
  std::fprintf(stderr, "EMU ERROR: %s (thread %u)\n", what, threadIdx.x);
  std::abort();
}
static void emu_sync(unsigned mask) {
  const int g = __builtin_popcount(mask);
  if (g != emu_group) emu_fail("mask does not name one group");
  const unsigned lane = threadIdx.x & 31u;
  if (!((mask >> lane) & 1u)) emu_fail("calling lane not in mask");
  const unsigned gid = ((threadIdx.x & ~31u) + __builtin_ctz(mask)) / g;
  if ((threadIdx.x / g) != gid) emu_fail("mask is not the caller's group");
  emu_bars[gid]->arrive_and_wait();
}
// A lane's exchanges (shuffles, ballots) use two slot arrays in turn, one barrier each: a lane
// writes its slot of exchange k + 2 after the barrier of exchange k + 1, which no lane of its
// group reaches before it has read exchange k. (Every lane starts a block at turn 0.)
static unsigned long long emu_slots[2][1024];
thread_local unsigned emu_turn;
static const unsigned long long* emu_exchange(unsigned mask, unsigned long long v) {
  unsigned long long* slot = emu_slots[emu_turn++ & 1u];
  slot[threadIdx.x] = v;
  emu_sync(mask);
  return slot;
}
static inline void __syncwarp(unsigned mask = 0xffffffffu) { emu_sync(mask); }
template <class T> static T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
  const unsigned long long* slot = emu_exchange(mask, (unsigned long long)v);
  const unsigned l = threadIdx.x & 31u, seg = l & ~(unsigned)(width - 1);
  T r = v;
  if (l - seg >= d) {
    if (!((mask >> (l - d)) & 1u)) emu_fail("shfl_up source lane not in mask");
    r = (T)slot[(threadIdx.x & ~31u) + l - d];
  }
  return r;
}
template <class T> static T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const unsigned long long* slot = emu_exchange(mask, (unsigned long long)v);
  const unsigned l = threadIdx.x & 31u, seg = l & ~(unsigned)(width - 1);
  const unsigned s = seg + ((unsigned)src % (unsigned)width);
  if (!((mask >> s) & 1u)) emu_fail("shfl source lane not in mask");
  return (T)slot[(threadIdx.x & ~31u) + s];
}
// Used by the EBP kernels only.
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
template <class T> static T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const unsigned long long* slot = emu_exchange(mask, (unsigned long long)v);
  const unsigned l = threadIdx.x & 31u;
  const unsigned s = l ^ (unsigned)lane_mask;
  if (!((mask >> s) & 1u)) emu_fail("shfl_xor source lane not in mask");
  return (T)slot[(threadIdx.x & ~31u) + s];
}
static unsigned __ballot_sync(unsigned mask, int pred) {
  const unsigned long long* slot = emu_exchange(mask, pred ? 1ull : 0ull);
  unsigned r = 0;
  for (unsigned l = 0; l < 32; ++l)
    if (((mask >> l) & 1u) && slot[(threadIdx.x & ~31u) + l]) r |= 1u << l;
  return r;
}
"""

#: What every harness does around its launch, included after the kernel source.
HARNESS_COMMON = r"""
#include <condition_variable>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
static std::vector<unsigned char> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<unsigned char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
// A 16-byte aligned allocation of exactly n bytes (at least 1): ASan flags any byte past it.
static void* alloc_exact(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, 16, n ? n : 1) != 0) std::abort();
  return p;
}
template <class T> static T* exact(const std::vector<unsigned char>& v) {  // exact-size heap copy
  T* p = (T*)alloc_exact(v.size());
  if (!v.empty()) std::memcpy(p, v.data(), v.size());
  return p;
}
// The payload placed `shift` bytes past a 16-byte boundary, in an allocation that starts at
// that boundary (the aligned 16-byte block a row's staging may read from before the payload's
// first byte) and ends with the payload's last byte: a read past it is an ASan error (the 16
// bytes of tail padding after the last row cover the aligned blocks the staging reads after
// a row), and with shift 0 so is a read before it.
static const u8* place_payload(const std::vector<unsigned char>& payload, long shift) {
  unsigned char* raw = (unsigned char*)alloc_exact(shift + payload.size());
  std::memset(raw, 0xCD, shift);
  if (!payload.empty()) std::memcpy(raw + shift, payload.data(), payload.size());
  return raw + shift;
}
// nbytes of output, `shift` bytes into an allocation poisoned with 0xFF, one guard byte after.
struct EmuOutput {
  unsigned char* raw;
  long shift, nbytes;
  u8* data() const { return raw + shift; }
};
static EmuOutput poisoned_output(long nbytes, long shift) {
  unsigned char* raw = (unsigned char*)std::malloc(nbytes + shift + 1);
  std::memset(raw, 0xFF, nbytes + shift + 1);
  return {raw, shift, nbytes};
}
// The threads of a block: kept across blocks, launches and cases (creating 32 threads under ASan
// costs more than a small launch). run(n, f) has threads 0..n-1 each run f() once, all at once
// (the barriers need every lane runnable), and returns when all are done; the mutex orders
// their accesses before and after, as joining them would.
struct EmuPool {
  std::mutex m;
  std::condition_variable go, done;
  const std::function<void()>* body = nullptr;
  unsigned long round = 0;
  long lanes = 0, left = 0, threads = 0;
  void run(long n, const std::function<void()>& f) {
    for (; threads < n; ++threads) std::thread([this, t = threads] { serve(t); }).detach();
    std::unique_lock<std::mutex> lk(m);
    body = &f;
    lanes = left = n;
    ++round;
    go.notify_all();
    done.wait(lk, [&] { return left == 0; });
  }
  void serve(long t) {
    unsigned long seen = 0;
    std::unique_lock<std::mutex> lk(m);
    for (;;) {
      go.wait(lk, [&] { return round != seen; });
      seen = round;
      if (t >= lanes) continue;  // not a thread of this block
      lk.unlock();
      threadIdx = {(unsigned)t, 0, 0};
      emu_turn = 0;
      (*body)();
      lk.lock();
      if (--left == 0) done.notify_one();
    }
  }
};
static EmuPool* emu_pool = new EmuPool;  // never destroyed: its threads wait until the process exits
// grid blocks of `block` threads, one block after the other, every thread running body();
// lanes sync in groups of `group`; the block's shared memory starts as garbage.
template <class F> static void emu_launch(long grid, long block, int group, void* smem, size_t smem_bytes,
                                          F body) {
  emu_group = group;
  blockDim = {(unsigned)block, 1, 1};
  gridDim = {(unsigned)grid, 1, 1};
  const std::function<void()> f = body;
  for (long b = 0; b < grid; ++b) {
    blockIdx = {(unsigned)b, 0, 0};
    std::memset(smem, 0xA5, smem_bytes);
    emu_bars.clear();
    for (long k = 0; k < block / group; ++k) emu_bars.emplace_back(new std::barrier<>(group));
    emu_pool->run(block, f);
  }
}
// Exit status 3 on a write outside the output; else out.bin and err.bin written, 0.
static int emu_finish(const std::string& dir, const EmuOutput& o, const u64* err) {
  if (o.raw[o.nbytes + o.shift] != 0xFF) { std::fprintf(stderr, "write past out\n"); return 3; }
  for (long k = 0; k < o.shift; ++k)
    if (o.raw[k] != 0xFF) { std::fprintf(stderr, "write before out\n"); return 3; }
  std::ofstream of(dir + "/out.bin", std::ios::binary);
  of.write((const char*)o.data(), o.nbytes);
  std::ofstream ef(dir + "/err.bin", std::ios::binary);
  ef.write((const char*)err, 2 * sizeof(u64));
  return 0;
}
// One launch per case folder named on the command line, in turn (run_case, the harness's own,
// defined after this file): one process runs many cases. "EMU CASE <folder>" goes to stderr
// before each, so a sanitizer report or an abort names its case; the first failure ends the run.
static int run_case(const std::string& dir);
int main(int argc, char** argv) {
  for (int k = 1; k < argc; ++k) {
    std::fprintf(stderr, "EMU CASE %s\n", argv[k]);
    if (const int rc = run_case(argv[k])) return rc;
  }
  return 0;
}
"""


#: the executables built so far this session, by (name, harness, sources): every test module
#: that asks for the same emulator gets the one build (tmp_path_factory's folders last the session).
_BUILT: dict = {}


def build_emulator(tmp_path_factory, name: str, harness: str, sources) -> Path:
    """Compile kernel sources as host C++ with the warp emulation shim and a harness main()
    (ASan + UBSan when the toolchain has them); the executable's path. Built once per session."""
    key = (name, harness, tuple(sources))
    if key not in _BUILT:
        _BUILT[key] = _build(tmp_path_factory, name, harness, sources)
    return _BUILT[key]


def _build(tmp_path_factory, name: str, harness: str, sources) -> Path:
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler (g++/clang++) to build the warp emulation")
    d = tmp_path_factory.mktemp(name)
    (d / "shim.h").write_text(SHIM)
    (d / "harness.h").write_text(HARNESS_COMMON)
    (d / "harness.cpp").write_text(harness)
    for source in tuple(sources) + tuple(cc.header_names()):
        (d / source).write_text(cc.read_source(source))
    base = [cxx, "-std=c++20", "-O1", "-g", "-pthread", "-Wall", "-Wno-unknown-pragmas",
            "-Wno-unused-function", "-I", str(d), str(d / "harness.cpp"), "-o", str(d / "harness")]
    san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    proc = subprocess.run(base[:1] + san + base[1:], capture_output=True, text=True)
    if proc.returncode != 0:  # no sanitizer runtime: still run the logic checks
        proc = subprocess.run(base, capture_output=True, text=True)
    assert proc.returncode == 0, f"{', '.join(sources)} do not compile as host C++:\n{proc.stderr}"
    return d / "harness"


class Emulator:
    """A harness executable: one emulated launch per call (launch), or many launches in one
    process (launch_many)."""

    #: cases per process in launch_many (its command line names each case's folder)
    BATCH = 400

    def __init__(self, exe):
        self.exe = str(exe)

    @staticmethod
    def _write(d, params, arrays) -> None:
        for name, arr in arrays.items():
            np.ascontiguousarray(arr).tofile(os.path.join(d, name + ".bin"))
        with open(os.path.join(d, "params.txt"), "w") as f:
            f.write(" ".join(str(int(p)) if not isinstance(p, str) else p for p in params))

    @staticmethod
    def _read(d):
        out = np.fromfile(os.path.join(d, "out.bin"), dtype=np.uint8)
        err = np.fromfile(os.path.join(d, "err.bin"), dtype=np.uint64)
        return out, [None if e == np.uint64(2**64 - 1) else int(e) for e in err]

    def _run(self, cwd, folders, timeout):
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
        return subprocess.run([self.exe, *folders], cwd=cwd, capture_output=True, text=True,
                               timeout=timeout, env=env)

    def launch(self, d, params, arrays, timeout=300):
        """Write the inputs to folder d, run, read back (output bytes, error slots)."""
        self._write(d, params, arrays)
        proc = self._run(None, [str(d)], timeout)
        assert proc.returncode == 0, proc.stderr[-6000:]
        return self._read(d)

    def launch_many(self, d, cases, timeout=300):
        """One launch per (label, params, arrays) of `cases`, BATCH per process (their inputs in
        folders under d); the (output bytes, error slots) of each, in order. A launch that fails
        (a sanitizer error, an abort, a write outside the output) fails the test naming its label."""
        cases = list(cases)
        results = []
        for b in range(0, len(cases), self.BATCH):
            folders = []
            for k, (_, params, arrays) in enumerate(cases[b:b + self.BATCH], start=b):
                folders.append(f"c{k}")
                os.makedirs(os.path.join(d, folders[-1]), exist_ok=True)
                self._write(os.path.join(d, folders[-1]), params, arrays)
            try:
                proc = self._run(d, folders, timeout)
                status, stderr = proc.returncode, proc.stderr
            except subprocess.TimeoutExpired as e:  # a lane missing at a barrier: deadlock
                status, stderr = f"timed out after {timeout} s", e.stderr or ""
                stderr = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
            if status != 0:
                started = [ln.split()[-1] for ln in stderr.splitlines() if ln.startswith("EMU CASE ")]
                label = cases[int(started[-1][1:])][0] if started else "(before the first case)"
                log = "\n".join(ln for ln in stderr.splitlines() if not ln.startswith("EMU CASE "))
                pytest.fail(f"emulated launch failed (exit status {status}) on case {label}\n{log[-6000:]}",
                            pytrace=False)
            results.extend(self._read(os.path.join(d, f)) for f in folders)
        return results


def emulator_fixture(cls, name: str, harness: str, sources):
    """A module-scoped fixture: `cls` (an Emulator) over the sources built with `harness`
    (compiled once per session, whichever modules use it)."""

    @pytest.fixture(scope="module")
    def emulator(tmp_path_factory):
        return cls(build_emulator(tmp_path_factory, name, harness, sources))

    return emulator
