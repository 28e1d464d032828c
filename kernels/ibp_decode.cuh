// Device helpers of the IBP decoders (kernels/ibp_decode.cu); row format: docs/format.md.
//
// No standard headers: NVRTC compiles this without any include path. The same text also
// compiles as host C++ under the warp emulation of tests/gpu/test_ibp_compile.py, so
// everything here stays plain C++17 plus the CUDA intrinsics that emulation provides.
#pragma once

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

// Error slots written by every kernel (their indices are declared once on the host as
// ibp_graph.gpu.abi.ERR_INDEX / ERR_CORRUPT; tests/gpu/test_launch.py checks both agree) (err[] in device memory, initialised to ~0 by the
// host, read back after the launch). atomicMin keeps the smallest offender, so the host
// can name one deterministic culprit.
#define IBP_ERR_INDEX 0   // smallest output position i whose index[i] is out of range
#define IBP_ERR_CORRUPT 1 // smallest table row whose offsets or bit stream are inconsistent

// Payload bytes the format keeps past the last row (ibp_graph.layout.rows.PAYLOAD_TAIL,
// docs/format.md): the EBP decoder reads up to 11 bytes past a row's last byte.
#define IBP_PAYLOAD_TAIL 16

// The low n bits of a T (u32 or u64) set, n in [0, bits of T] (shifting by the word width
// is undefined).
template <class T>
__device__ __forceinline__ T ibp_lenmask(u32 n) {
  return n >= 8u * (u32)sizeof(T) ? ~(T)0 : (((T)1 << n) - (T)1);
}

// Copy the bytes [src, src + len) of global memory (device memory, or pinned host memory
// through its UVA address) into the shared buffer `dst`, as whole aligned 16-byte blocks:
// dst byte k is global byte (src & ~15) + k, so the row starts at dst byte (src & 15).
//
// Why whole aligned blocks: rows start at arbitrary byte offsets, and one 16-byte load per
// lane is the widest access there is (a warp moves 512 contiguous bytes per instruction,
// four full 128-byte lines). Every block read holds at least one byte of the row, so a read
// never leaves the row's allocation page: it cannot fault whatever the padding. The cost is
// at most 15 bytes read before and after the row; the memory system moves 32-byte sectors
// anyway, so the bytes that really move are the same.
//
// Each lane issues up to four independent loads before its first store, so a warp keeps up
// to 2 KiB in flight per row: that matters for zero-copy reads, whose PCIe round trip is a
// microsecond or more (Little's law: 55 GB/s x ~1.5 us ~ 80 KB must be in flight GPU-wide;
// with ~1000 resident groups that is under 100 bytes each, so one row per group suffices).
template <int G>
__device__ __forceinline__ void ibp_stage(uint4* dst, const u8* src, u32 len, u32 lane) {
  const u64 a = reinterpret_cast<u64>(src);
  const u64 a0 = a & ~15ull;
  const u32 nb = (u32)((((a + (u64)len + 15ull) & ~15ull) - a0) >> 4);
  // Derived from src (not from the integer a0) so the compiler keeps it a global pointer
  // and emits ld.global.v4 rather than generic loads.
  const uint4* g = reinterpret_cast<const uint4*>(src - (a & 15ull));
  for (u32 b = lane; b < nb; b += 4u * G) {
    const bool h1 = b + (u32)G < nb;
    const bool h2 = b + 2u * G < nb;
    const bool h3 = b + 3u * G < nb;
    uint4 v0 = g[b];
    uint4 v1 = v0, v2 = v0, v3 = v0;
    if (h1) v1 = g[b + G];
    if (h2) v2 = g[b + 2u * G];
    if (h3) v3 = g[b + 3u * G];
    dst[b] = v0;
    if (h1) dst[b + G] = v1;
    if (h2) dst[b + 2u * G] = v2;
    if (h3) dst[b + 3u * G] = v3;
  }
}

// The n low bits (n <= 32) of the bit stream at bit p of a staged buffer (32-bit words,
// little-endian: stream bit p is bit p & 31 of word p >> 5). Reads words q and q + 1;
// q is clamped to qmax so a corrupt stream reads garbage inside the buffer, never past it
// (the caller detects the corruption from the row's final bit count).
__device__ __forceinline__ u32 ibp_extract32(const u32* s, u32 p, u32 n, u32 qmax) {
  u32 q = p >> 5;
  q = q < qmax ? q : qmax;
  const u32 v = __funnelshift_r(s[q], s[q + 1], p & 31u);
  return v & ibp_lenmask<u32>(n);
}

// The n low bits (n <= 64) at bit p: words q .. q + 2 (a 64-bit field at an odd bit offset
// spans three 32-bit words).
__device__ __forceinline__ u64 ibp_extract64(const u32* s, u32 p, u32 n, u32 qmax) {
  u32 q = p >> 5;
  q = q < qmax ? q : qmax;
  const u32 r = p & 31u;
  const u32 w0 = s[q], w1 = s[q + 1], w2 = s[q + 2];
  const u64 v = ((u64)__funnelshift_r(w1, w2, r) << 32) | (u64)__funnelshift_r(w0, w1, r);
  return v & ibp_lenmask<u64>(n);
}

// Table row r's compressed bytes, [*start, *start + *len) of the payload, from int32
// (off64 == 0) or int64 offsets. False when the offsets are inconsistent: a negative start,
// an empty row, a row longer than a raw one, or one that leaves fewer than IBP_PAYLOAD_TAIL
// payload bytes after it (the caller reports row r in IBP_ERR_CORRUPT). Nothing checks the
// offsets before a launch (they may live on the GPU), and the EBP decoder reads past a row's
// end: without the tail check, a corrupt last offset inside the tail made it read past the
// payload's end.
__device__ __forceinline__ bool ibp_row_range(const void* offsets, int off64, i64 r, u32 row_nbytes,
                                              i64 payload_nbytes, i64* start, i64* len) {
  i64 o0, o1;
  if (off64) {
    o0 = static_cast<const i64*>(offsets)[r];
    o1 = static_cast<const i64*>(offsets)[r + 1];
  } else {
    o0 = static_cast<const int*>(offsets)[r];
    o1 = static_cast<const int*>(offsets)[r + 1];
  }
  *start = o0;
  *len = o1 - o0;
  return o0 >= 0 && *len > 0 && *len <= (i64)row_nbytes &&
         o1 <= payload_nbytes - IBP_PAYLOAD_TAIL;
}

// Per-column decode table entry of the IBP decoder (16 bytes, one vector load). Declared
// once on the host as ibp_graph.gpu.abi.IBP_COLUMN (tests/gpu/test_launch.py checks that
// both agree field by field):
//   bitval_lo, bitval_hi: bitval bits 0..31 and 32..63 (bitval_hi is 0 for W = 32)
//   widths:  free_bits (bits 0..7) | n_runs (bits 8..15) | run 0 (bits 16..28: shift in
//            16..21, length in 22..28)
//   runs_at: index into the runs array of this column's run 1 (runs 1 .. n_runs-1 follow)
// A run (shift, length, src) says: bits [src, src + length) of the compacted value go to
// bits [shift, shift + length) of the word. Run 0 always has src = 0. A run entry in the
// runs array packs shift (bits 0..7) | length (bits 8..15) | src (bits 16..23).
//
// pdep by runs: a GPU has no pdep instruction; a column's free bits form a few runs of
// consecutive bit positions (typically one or two: the low mantissa bits, maybe an
// exponent bit), so scattering is one shift-mask-shift-or per run. Adversarial masks (every
// other bit free) cost W/2 runs: slower, never wrong.
struct alignas(16) IbpColumn {
  u32 bitval_lo;
  u32 bitval_hi;
  u32 widths;
  u32 runs_at;
};

// One column's entry, read with a single 16-byte read-only load.
__device__ __forceinline__ IbpColumn ibp_load_column(const IbpColumn* p) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  IbpColumn c;
  c.bitval_lo = v.x;
  c.bitval_hi = v.y;
  c.widths = v.z;
  c.runs_at = v.w;
  return c;
}

// Scatter the compacted value v (T = u32 for W = 32, u64 for W = 64) to the column's free
// bit positions, run by run, and OR in its bitval.
template <class T>
__device__ __forceinline__ T ibp_pdep(T v, IbpColumn ci, const u32* runs) {
  T x = (T)ci.bitval_lo;
  if constexpr (sizeof(T) == 8) x |= (T)ci.bitval_hi << 32;
  const u32 nr = (ci.widths >> 8) & 0xffu;
  if (nr) {
    const u32 r0 = ci.widths >> 16;
    x |= (v & ibp_lenmask<T>((r0 >> 6) & 0x7fu)) << (r0 & 0x3fu);
    for (u32 k = 1; k < nr; ++k) {
      const u32 rr = __ldg(runs + ci.runs_at + k - 1u);
      x |= ((v >> (rr >> 16)) & ibp_lenmask<T>((rr >> 8) & 0xffu)) << (rr & 0xffu);
    }
  }
  return x;
}

// Store the decoded word j (wb = W/8 bytes, little-endian) of an output row, truncated to
// the row's row_nbytes. `unit` (1, 2, 4 or 8) divides wb, row_nbytes and the output
// pointer's alignment (the host picks it), so every access below is aligned.
__device__ __forceinline__ void ibp_store_word(u8* orow, u32 j, u32 wb, u64 x, u32 row_nbytes,
                                               u32 unit) {
  const u32 ob = j * wb;
  const u32 rem = row_nbytes - ob;
  const u32 nb = rem < wb ? rem : wb;
  u8* o = orow + ob;
  if (unit == 8u) {
    *reinterpret_cast<u64*>(o) = x;
  } else if (unit == 4u) {
    *reinterpret_cast<u32*>(o) = (u32)x;
    if (nb > 4u) *reinterpret_cast<u32*>(o + 4) = (u32)(x >> 32);
  } else if (unit == 2u) {
    for (u32 k = 0; k < nb; k += 2u) *reinterpret_cast<u16*>(o + k) = (u16)(x >> (8u * k));
  } else {
    for (u32 k = 0; k < nb; ++k) o[k] = (u8)(x >> (8u * k));
  }
}
