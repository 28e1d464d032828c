// EBP decoders on the GPU (row format: docs/format.md, "EBP row format"; host side:
// ibp_graph/gpu/ebp.py; parameter blocks declared once in ibp_graph/gpu/abi.py). Shares the
// IBP kernels' helpers and error slots.
//
// Kernels (extern "C"):
//   ebp_decode_w{8,16,32,64}
//       Decode compressed rows of W-bit elements into raw rows. Rows are found either by
//       offsets (+ optional index: gather + decode from device memory), or by per-output
//       starts/lens (the rows ebp_gather copied out of pinned host memory).
//   ebp_gather
//       Copy the compressed bytes of rows `index` of a table (pinned host memory through
//       its UVA address, or device memory) into a device scratch buffer, one row per
//       fixed-size slot, with aligned 16-byte reads: the zero-copy half of a fetch. Only
//       the selected rows' bytes cross PCIe; ebp_decode then reads them from device memory.
//
// Decode design (a warp decodes 32 rows at a time, lane l owning row base + l):
//   0. Each lane reads its row's offsets (or start/length), checks them, and parses the
//      row header (mode bit, Elias-gamma counts), so it knows where the low stream, the
//      escape area and the code stream start.
//   1. Codes are variable length, so each lane walks its own row's code stream
//      sequentially: 8 bits peeked, one lookup in the column's 256-entry decode table
//      (dictionary index | code length << 8), the index stored to shared memory. The
//      codes of up to EBP_CHUNK elements per row are parsed per round.
//   2. The warp then materialises the 32 rows one after the other, lane l taking elements
//      k = l, l + 32, ...: the low bits sit at a static bit offset per column (dense rows)
//      or per element (sparse rows); the high part is dictionary[index], or for an escape
//      the next slot of the escape area (slot = escapes before it: __ballot_sync + __popc,
//      carried across rounds); stores are consecutive: coalesced. Sparse rows first get
//      their columns' default values, then their listed elements.
//   3. A row whose stream does not end in its last byte, uses another number of escapes
//      than its header says, lists columns out of order or has a bit pattern no code
//      starts with is reported in the error slot (smallest table row wins).
// Every read of a row is clamped to the row's 32-bit words plus two (the payload keeps 16
// bytes of tail padding, which ibp_row_range checks, the scratch slots 16 bytes of slack), so
// a corrupt stream reads garbage, never another allocation. A row's header is read with
// 64-bit bit positions, and the streams it places must start inside the row: a damaged
// header's counts can place them past 2**32 bits, which 32-bit arithmetic wrapped back into
// the row, where the length check of 3 could then pass. Every later position is below
// 16 * row_nbytes + 128 (the header's starts, plus at most 8 bits per code or W bits per
// element), so 32 bits hold them for the rows the host accepts
// (ibp_graph.gpu.abi.EBP_MAX_ROW_NBYTES): wider positions cost registers in the hot loops.
//
// Speed budget (H200, not measured here): phase 1 is ~25 instructions per element per lane
// with a dependent load chain (stream word, decode table); a warp walks 32 rows at once,
// so ~100 warp instructions per 128-element row; phase 2 ~35 per 32 elements plus ~10
// shuffles per row. ~230 warp instructions per 512-byte float32 row against a budget of
// ~860 at 600 GB/s (132 SMs x 4 schedulers x 1.9 GHz); the dependent loads are hidden by
// 48 resident warps per SM (static shared memory 33 KB per 256-thread block).
#include "ibp_decode.cuh"

#define EBP_CHUNK 128u     // codes parsed per row per round
#define EBP_ESC 255u       // dictionary index of the escape
#define EBP_BAD 0xffffu    // decode-table entry of a pattern no code starts with
#define EBP_MAX_WARPS 8    // blockDim.x <= 256
#define EBP_FULL 0xffffffffu

__shared__ u8 ebp_sym[EBP_MAX_WARPS][32][EBP_CHUNK + 4];  // +4: lanes hit distinct banks

// Bit fields are read with ibp_extract64 (ibp_decode.cuh), its word index clamped to qmax,
// the row's last word, so the three words read stay inside the row plus 8 bytes; the header
// with ebp_bits, the same at a 64-bit bit position.
__device__ __forceinline__ u64 ebp_bits(const u32* w, u64 p, u32 n, u32 qmax) {
  const u64 q = p >> 5;
  return ibp_extract64(w + (q < qmax ? q : (u64)qmax), (u32)p & 31u, n, 0u);
}

// Elias-gamma code at bit *p (docs/format.md); 0 for an invalid code (more than 31 zeros).
__device__ __forceinline__ u32 ebp_gamma(const u32* w, u32 qmax, u64* p) {
  const u64 v = ebp_bits(w, *p, 64, qmax);
  if (v == 0ull) return 0u;
  const u32 z = (u32)(__ffsll((long long)v) - 1);
  if (z > 31u) return 0u;
  *p += 2u * z + 1u;
  return (1u << z) | (u32)((v >> (z + 1u)) & ibp_lenmask<u64>(z));
}

template <int W>
__device__ __forceinline__ void ebp_store(u8* orow, u32 col, u64 x) {
  if constexpr (W == 8) orow[col] = (u8)x;
  else if constexpr (W == 16) reinterpret_cast<u16*>(orow)[col] = (u16)x;
  else if constexpr (W == 32) reinterpret_cast<u32*>(orow)[col] = (u32)x;
  else reinterpret_cast<u64*>(orow)[col] = x;
}

// Per-column entry of the EBP decoder (16 bytes), declared once on the host as
// ibp_graph.gpu.abi.EBP_COLUMN (tests/gpu/test_launch.py checks both agree):
//   low_at: bit offset of column j's low bits in a dense row's low stream
//   tid: the column's dense code table; sparse_tid: its sparse code table
//   low_bits: lw_j, the low bits stored verbatim
// dlut: 256 u16 per table; dict: 256 u64 per table; defaults: u64 per column.
struct alignas(16) EbpColumn {
  u32 low_at;
  u32 tid;
  u32 sparse_tid;
  u32 low_bits;
};

// A compressed row's header (phase 0): its element and escape counts, and where its streams
// start (64-bit bit positions into the row's words).
struct EbpRowHeader {
  u32 mode, count, ne;
  u64 low_start, esc_start, pos_start, pc;  // pc: the code stream
};

// Parse the header of a compressed row of L bytes starting at bit sh of the words w (last word
// qmax). False for a corrupt header: a bad gamma code, more elements than d or escapes than
// elements, or a code stream that would start past the row's last byte (the row could not
// end there).
__device__ __forceinline__ bool ebp_row_header(const u32* w, u32 qmax, u32 sh, u32 L, int sparse,
                                               u32 d, u32 HE, u32 LS, u32 IB, u32 HS,
                                               u32 low_total, EbpRowHeader* h) {
  u64 p = sh;
  bool ok = true;
  h->mode = 0u;
  h->count = d;
  h->pos_start = 0;
  if (sparse) {
    h->mode = (u32)ebp_bits(w, p, 1, qmax);
    p += 1u;
  }
  if (h->mode == 0u) {
    h->low_start = p;
    p += low_total;
    const u32 v = ebp_gamma(w, qmax, &p);
    h->ne = v - 1u;
    if (v == 0u || h->ne > d) ok = false;
    h->esc_start = p;
    h->pc = p + (u64)h->ne * HE;
  } else {
    const u32 v = ebp_gamma(w, qmax, &p);
    h->count = v - 1u;
    const u32 v2 = ebp_gamma(w, qmax, &p);
    h->ne = v2 - 1u;
    if (v == 0u || v2 == 0u || h->count > d || h->ne > h->count) ok = false;
    h->pos_start = p;
    h->low_start = p + (u64)h->count * IB;
    h->esc_start = h->low_start + (u64)h->count * LS;
    h->pc = h->esc_start + (u64)h->ne * HS;
  }
  return ok && h->pc <= (u64)sh + 8ull * L;
}

template <int W>
__device__ __forceinline__ void ebp_decode_impl(
    const u8* payload, const void* offsets, int off64, const i64* index, const i64* starts,
    const int* lens, i64 n_out, i64 n_rows, i64 payload_nbytes, const EbpColumn* colinfo,
    const u64* defaults, const u16* dlut, const u64* dict, int d_i, int row_nbytes_i,
    int sparse, int HE_i, int LS_i, int IB_i, int low_total_i, u8* out, u64* err) {
  static_assert(W == 8 || W == 16 || W == 32 || W == 64, "W is 8, 16, 32 or 64");
  const u32 d = (u32)d_i;
  const u32 row_nbytes = (u32)row_nbytes_i;
  const u32 HE = (u32)HE_i, LS = (u32)LS_i, IB = (u32)IB_i, HS = (u32)W - (u32)LS_i;
  const u32 low_total = (u32)low_total_i;
  const u32 lane = threadIdx.x & 31u;
  const u32 warp = threadIdx.x >> 5;
  const u32 warps = blockDim.x >> 5;
  u8 (*sym)[EBP_CHUNK + 4] = ebp_sym[warp];

  for (i64 base = ((i64)blockIdx.x * warps + warp) * 32; base < n_out;
       base += (i64)gridDim.x * warps * 32) {
    // ---- 0: this lane's row --------------------------------------------------------
    const i64 i = base + (i64)lane;
    bool ok = false, raw = false;
    u32 mode = 0, count = 0, ne = 0, sh = 0, qmax = 0, L = 0;
    u32 low_start = 0, esc_start = 0, pos_start = 0, pc = 0;
    const u32* w = nullptr;
    i64 r = i;
    if (i < n_out) {
      i64 o0 = 0, len = -1;
      bool found = true;
      if (index != nullptr) {
        r = index[i];
        if (r < 0 || r >= n_rows) {
          if (starts == nullptr) atomicMin(err + IBP_ERR_INDEX, (u64)i);
          found = false;
        }
      }
      if (found) {
        if (starts != nullptr) {
          o0 = starts[i];
          len = lens[i];  // < 0: ebp_gather already reported this row
        } else if (!ibp_row_range(offsets, off64, r, row_nbytes, payload_nbytes, &o0, &len)) {
          atomicMin(err + IBP_ERR_CORRUPT, (u64)r);
          len = -1;
        }
      }
      if (len > 0) {
        const u8* src = payload + o0;
        const u32 a3 = (u32)(reinterpret_cast<u64>(src) & 3ull);
        w = reinterpret_cast<const u32*>(src - a3);
        sh = 8u * a3;
        L = (u32)len;
        qmax = (a3 + L - 1u) >> 2;
        ok = true;
        raw = (L == row_nbytes);
        count = d;
        if (!raw) {
          EbpRowHeader h;
          ok = ebp_row_header(w, qmax, sh, L, sparse, d, HE, LS, IB, HS, low_total, &h);
          mode = h.mode;
          count = h.count;
          ne = h.ne;
          low_start = (u32)h.low_start;
          esc_start = (u32)h.esc_start;
          pos_start = (u32)h.pos_start;
          pc = (u32)h.pc;
          if (!ok) atomicMin(err + IBP_ERR_CORRUPT, (u64)r);
        }
      }
    }
    if (!ok) count = 0;
    u32 maxcount = raw ? 0u : count;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const u32 t = __shfl_xor_sync(EBP_FULL, maxcount, o);
      maxcount = t > maxcount ? t : maxcount;
    }
    u32 seen = 0;      // escapes used so far by this lane's row
    i64 prev = -1;     // last column listed by this lane's sparse row

    for (u32 c0 = 0;; c0 += EBP_CHUNK) {
      // ---- 1: parse this lane's codes of round c0 -------------------------------------
      if (ok && !raw) {
        const u32 end = count < c0 + EBP_CHUNK ? count : c0 + EBP_CHUNK;
        for (u32 k = c0; k < end; ++k) {
          u32 tid;
          if (mode == 0u) {
            tid = __ldg(&colinfo[k].tid);
          } else {
            const u32 col = (u32)ibp_extract64(w, pos_start + k * IB, IB, qmax);
            if ((i64)col <= prev || col >= d) {
              ok = false;
              break;
            }
            prev = (i64)col;
            tid = __ldg(&colinfo[col].sparse_tid);
          }
          const u32 e = __ldg(dlut + (u64)tid * 256u + (u32)ibp_extract64(w, pc, 8, qmax));
          if (e == EBP_BAD) {
            ok = false;
            break;
          }
          pc += e >> 8;
          sym[lane][k - c0] = (u8)e;
        }
        if (!ok) atomicMin(err + IBP_ERR_CORRUPT, (u64)r);
      }
      __syncwarp(EBP_FULL);

      // ---- 2: materialise the warp's rows, one at a time ------------------------------
      for (u32 rr = 0; rr < 32u; ++rr) {
        const u32 flags = __shfl_sync(EBP_FULL, (ok ? 1u : 0u) | (raw ? 2u : 0u) | (mode << 2), rr);
        if (!(flags & 1u)) continue;
        const u64 wa = ((u64)__shfl_sync(EBP_FULL, (u32)(reinterpret_cast<u64>(w) >> 32), rr) << 32) |
                       (u64)__shfl_sync(EBP_FULL, (u32)reinterpret_cast<u64>(w), rr);
        const u32* rw = reinterpret_cast<const u32*>(wa);
        const u32 rq = __shfl_sync(EBP_FULL, qmax, rr);
        u8* orow = out + (u64)(base + (i64)rr) * row_nbytes;
        if (flags & 2u) {  // raw row: its bytes are the elements
          if (c0 == 0u) {
            const u32 rsh = __shfl_sync(EBP_FULL, sh, rr);
            for (u32 j = lane; j < d; j += 32u)
              ebp_store<W>(orow, j, ibp_extract64(rw, rsh + j * (u32)W, (u32)W, rq));
          }
          continue;
        }
        const u32 rmode = flags >> 2;
        const u32 rcount = __shfl_sync(EBP_FULL, count, rr);
        const u32 rlow = __shfl_sync(EBP_FULL, low_start, rr);
        const u32 resc = __shfl_sync(EBP_FULL, esc_start, rr);
        const u32 rpos = __shfl_sync(EBP_FULL, pos_start, rr);
        u32 rseen = __shfl_sync(EBP_FULL, seen, rr);
        const u32 ew = rmode ? HS : HE;
        if (rmode == 1u && c0 == 0u) {  // sparse row: defaults first
          for (u32 j = lane; j < d; j += 32u) ebp_store<W>(orow, j, __ldg(defaults + j));
          __syncwarp(EBP_FULL);  // orders the default stores before the element stores below
        }
        const u32 end = rcount < c0 + EBP_CHUNK ? rcount : c0 + EBP_CHUNK;
        for (u32 kb = c0; kb < end; kb += 32u) {
          const u32 k = kb + lane;
          const bool active = k < end;
          const u32 s = active ? (u32)sym[rr][k - c0] : 0u;
          const bool esc = active && s == EBP_ESC;
          const u32 ball = __ballot_sync(EBP_FULL, esc);
          const u32 slot = rseen + __popc(ball & ((1u << lane) - 1u));
          rseen += __popc(ball);
          if (active) {
            u32 col, lw, tid;
            u64 lo;
            if (rmode == 0u) {
              const uint4 ci = __ldg(reinterpret_cast<const uint4*>(colinfo + k));
              const EbpColumn c = {ci.x, ci.y, ci.z, ci.w};  // one 16-byte load
              col = k;
              lw = c.low_bits;
              tid = c.tid;
              lo = ibp_extract64(rw, rlow + c.low_at, lw, rq);
            } else {
              col = (u32)ibp_extract64(rw, rpos + k * IB, IB, rq);  // checked in phase 1
              lw = LS;
              tid = __ldg(&colinfo[col].sparse_tid);
              lo = ibp_extract64(rw, rlow + k * LS, LS, rq);
            }
            const u64 hi = esc ? ibp_extract64(rw, resc + slot * ew, ew, rq)
                               : __ldg(dict + (u64)tid * 256u + s);
            const u64 x = lw < 64u ? ((hi << lw) | lo) : lo;
            ebp_store<W>(orow, col, x);
          }
        }
        if (lane == rr) seen = rseen;
      }
      __syncwarp(EBP_FULL);
      if (c0 + EBP_CHUNK >= maxcount) break;
    }
    // ---- 3: the row must end in its last byte and use exactly its escapes ---------------
    if (ok && !raw && (seen != ne || ((pc - sh + 7u) >> 3) != L))
      atomicMin(err + IBP_ERR_CORRUPT, (u64)r);
  }
}

#define EBP_DECODE_KERNEL(W)                                                                   \
  extern "C" __global__ void __launch_bounds__(256) ebp_decode_w##W(                           \
      const u8* payload, const void* offsets, int off64, const i64* index, const i64* starts,  \
      const int* lens, i64 n_out, i64 n_rows, i64 payload_nbytes, const EbpColumn* colinfo,    \
      const u64* defaults, const u16* dlut, const u64* dict, int d, int row_nbytes,            \
      int sparse, int HE, int LS, int IB, int low_total, u8* out, u64* err) {                  \
    ebp_decode_impl<W>(payload, offsets, off64, index, starts, lens, n_out, n_rows,            \
                       payload_nbytes, colinfo, defaults, dlut, dict, d, row_nbytes, sparse,   \
                       HE, LS, IB, low_total, out, err);                                       \
  }

EBP_DECODE_KERNEL(8)
EBP_DECODE_KERNEL(16)
EBP_DECODE_KERNEL(32)
EBP_DECODE_KERNEL(64)

// Zero-copy half of a fetch: scratch slot i (stride bytes, a multiple of 16) receives the
// aligned 16-byte blocks covering table row index[i]; starts[i] is where the row begins in
// scratch, lens[i] its length (-1 when the index or the offsets are bad: reported here).
extern "C" __global__ void __launch_bounds__(256) ebp_gather(
    const u8* payload, const void* offsets, int off64, const i64* index, i64 n_out, i64 n_rows,
    i64 payload_nbytes, int row_nbytes, i64 stride, u8* scratch, i64* starts, int* lens,
    u64* err) {
  const u32 lane = threadIdx.x & 31u;
  const u32 warps = blockDim.x >> 5;
  for (i64 i = (i64)blockIdx.x * warps + (threadIdx.x >> 5); i < n_out;
       i += (i64)gridDim.x * warps) {
    const i64 r = index[i];
    if (r < 0 || r >= n_rows) {
      if (lane == 0) {
        atomicMin(err + IBP_ERR_INDEX, (u64)i);
        lens[i] = -1;
      }
      continue;
    }
    i64 o0, len;
    if (!ibp_row_range(offsets, off64, r, (u32)row_nbytes, payload_nbytes, &o0, &len)) {
      if (lane == 0) {
        atomicMin(err + IBP_ERR_CORRUPT, (u64)r);
        lens[i] = -1;
      }
      continue;
    }
    const u8* src = payload + o0;
    ibp_stage<32>(reinterpret_cast<uint4*>(scratch + i * stride), src, (u32)len, lane);
    if (lane == 0) {
      starts[i] = i * stride + (i64)(reinterpret_cast<u64>(src) & 15ull);
      lens[i] = (int)len;
    }
  }
}
