// IBP decoders on the GPU (row format: docs/format.md; host side: ibp_graph/gpu/ibp.py and raw.py;
// parameter blocks declared once in ibp_graph/gpu/abi.py).
//
// Kernels (extern "C", one per template instance so the host looks them up by name):
//   ibp_decode_w{32,64}_g{1,2,4,8,16,32}
//       Decode compressed rows into raw rows. With index == nullptr output row i is table
//       row i (the whole tensor, in order); otherwise output row i is table row index[i]
//       (gather + decode). payload and offsets may live in device memory or in pinned host
//       memory (their UVA addresses): the latter is the fused zero-copy gather + decode,
//       which reads only the selected rows' compressed bytes over PCIe.
//   ibp_gather_v{1,2,4,8,16}
//       Plain gather of fixed-stride raw rows (the identity codec's zero-copy fetch, and the
//       baseline the decoders are measured against).
//
// Decode design (one group of G lanes per row; G = 32 for rows of >= 32 words, the next
// power of two above n_words for shorter rows, so a warp decodes 32 / G rows at once):
//   1. Lanes read index[i] and offsets[r], offsets[r+1] (same address in every lane: one
//      broadcast request), and check them; a bad index or inconsistent offsets set an
//      error slot (atomicMin) and skip the row. Nothing is ever read from a bad address.
//   2. The row's bytes are staged into the group's shared buffer with aligned 16-byte
//      loads (ibp_stage): all the row's global (or PCIe) reads are issued at once, before
//      any dependent work, and are as wide as the hardware allows.
//   3. Words are decoded G at a time, lane l taking word j = c + l. Its participation bit
//      (header bit j) and its column's free_bits give its width; a warp inclusive scan
//      (__shfl_up_sync, log2 G steps) turns widths into bit offsets; the lane extracts its
//      field with funnel shifts from the staged buffer, scatters it to the column's free
//      bit positions (pdep by runs, see ibp_decode.cuh), ORs bitval, and stores its word
//      (consecutive lanes write consecutive words: coalesced). A raw row (length ==
//      row_nbytes) is the same loop with no header and every word W bits wide.
//   4. The final bit position must end in the row's last byte; otherwise the row is
//      reported corrupt (a free integrity check of offsets, header and tables together).
//
// Speed budget (H200: 132 SMs, ~1.9 GHz, 4 warp schedulers per SM, HBM ~4.8 TB/s, PCIe 5
// x16 ~55 GB/s). Device-memory decode of 512-byte rows at 86 % moves ~1.86 bytes of HBM
// traffic per decoded byte, a floor of ~2.5 TB/s of decoded output; the instruction budget
// at the 600 GB/s target is ~890 warp instructions per 512-byte row, and this loop needs
// roughly 60-80 per 32 words (4 chunks for W = 32, 2 for W = 64) plus ~40 per row of
// staging and bookkeeping, so the decoder should sit well above the target and be bound
// by latency hiding (occupancy) rather than issue. Zero-copy: the floor is the bytes that
// cross PCIe / ~55 GB/s: the row bytes rounded out to 32-byte sectors (~31 bytes extra per
// row on average, because rows start anywhere) plus one sector for the offsets when they
// stay in host memory (put them in device memory to save it). Decoding adds no PCIe bytes.
#include "ibp_decode.cuh"

extern __shared__ uint4 ibp_smem[];

template <int W, int G>
__device__ __forceinline__ void ibp_decode_impl(
    const u8* payload, const void* offsets, int off64, const i64* index, i64 n_out,
    i64 n_rows, i64 payload_nbytes, const IbpColumn* cols, const u32* runs, int n_words_i,
    int row_nbytes_i, int header_bits_i, int store_unit_i, int cap_bytes_i, u8* out, u64* err) {
  static_assert(W == 32 || W == 64, "W is 32 or 64");
  static_assert(G == 1 || G == 2 || G == 4 || G == 8 || G == 16 || G == 32, "G | 32");
  const u32 n_words = (u32)n_words_i;
  const u32 row_nbytes = (u32)row_nbytes_i;
  const u32 header_bits = (u32)header_bits_i;
  const u32 unit = (u32)store_unit_i;
  const u32 cap_bytes = (u32)cap_bytes_i;

  const u32 lane = threadIdx.x & (u32)(G - 1);       // lane within the group
  const u32 group = threadIdx.x / (u32)G;            // group within the block
  const u32 groups_per_block = blockDim.x / (u32)G;  // blockDim.x is a multiple of 32
  const u32 gmask = (G == 32) ? 0xffffffffu
                              : (((1u << (G & 31)) - 1u) << ((threadIdx.x & 31u) & ~(u32)(G - 1)));

  uint4* sbuf = ibp_smem + (u64)group * (cap_bytes >> 4);
  const u8* s8 = reinterpret_cast<const u8*>(sbuf);
  const u32* s32 = reinterpret_cast<const u32*>(sbuf);
  // Highest word index an extraction may start at (it reads up to 2 words beyond it).
  const u32 qmax = (cap_bytes >> 2) - 3u;

  for (i64 i = (i64)blockIdx.x * groups_per_block + group; i < n_out;
       i += (i64)gridDim.x * groups_per_block) {
    i64 r = i;
    if (index != nullptr) {
      r = index[i];
      if (r < 0 || r >= n_rows) {
        if (lane == 0) atomicMin(err + IBP_ERR_INDEX, (u64)i);
        continue;
      }
    }
    i64 o0, len;
    if (!ibp_row_range(offsets, off64, r, row_nbytes, payload_nbytes, &o0, &len)) {
      if (lane == 0) atomicMin(err + IBP_ERR_CORRUPT, (u64)r);
      continue;
    }
    const u32 L = (u32)len;
    const u8* src = payload + o0;
    const u32 shift0 = (u32)(reinterpret_cast<u64>(src) & 15ull);  // row start in sbuf

    __syncwarp(gmask);  // every lane is done reading the previous row from sbuf
    ibp_stage<G>(sbuf, src, L, lane);
    __syncwarp(gmask);  // the staged row is visible to every lane of the group

    u8* orow = out + (u64)i * row_nbytes;
    const bool raw = (L == row_nbytes);
    u32 pos = (shift0 << 3) + (raw ? 0u : header_bits);  // bit position in sbuf

    for (u32 c = 0; c < n_words; c += (u32)G) {
      const u32 j = c + lane;
      const bool active = j < n_words;
      IbpColumn ci = {0u, 0u, 0u, 0u};
      u32 part = 0, w = 0;
      if (active) {
        if (raw) {
          w = W;
        } else {
          ci = ibp_load_column(cols + j);
          part = ((u32)s8[shift0 + (j >> 3)] >> (j & 7u)) & 1u;
          w = part ? (ci.widths & 0xffu) : (u32)W;
        }
      }
      // Inclusive scan of the widths over the group: lane l gets w_0 + ... + w_l.
      u32 incl = w;
#pragma unroll
      for (int d = 1; d < G; d <<= 1) {
        const u32 t = __shfl_up_sync(gmask, incl, d, G);
        if (lane >= (u32)d) incl += t;
      }
      const u32 p = pos + incl - w;
      pos += __shfl_sync(gmask, incl, G - 1, G);
      if (active) {
        u64 x;
        if constexpr (W == 32) {
          u32 v = ibp_extract32(s32, p, w, qmax);
          if (part) v = ibp_pdep<u32>(v, ci, runs);
          x = v;
        } else {
          u64 v = ibp_extract64(s32, p, w, qmax);
          if (part) v = ibp_pdep<u64>(v, ci, runs);
          x = v;
        }
        ibp_store_word(orow, j, (u32)(W / 8), x, row_nbytes, unit);
      }
    }
    // A compressed row's stream must end inside its last byte.
    if (!raw && lane == 0 && (((pos - (shift0 << 3)) + 7u) >> 3) != L)
      atomicMin(err + IBP_ERR_CORRUPT, (u64)r);
  }
}

#define IBP_DECODE_KERNEL(W, G)                                                                \
  extern "C" __global__ void __launch_bounds__(256) ibp_decode_w##W##_g##G(                    \
      const u8* payload, const void* offsets, int off64, const i64* index, i64 n_out,          \
      i64 n_rows, i64 payload_nbytes, const IbpColumn* cols, const u32* runs, int n_words,     \
      int row_nbytes, int header_bits, int store_unit, int cap_bytes, u8* out, u64* err) {     \
    ibp_decode_impl<W, G>(payload, offsets, off64, index, n_out, n_rows, payload_nbytes, cols, \
                          runs, n_words, row_nbytes, header_bits, store_unit, cap_bytes, out,  \
                          err);                                                                \
  }

IBP_DECODE_KERNEL(32, 1)
IBP_DECODE_KERNEL(32, 2)
IBP_DECODE_KERNEL(32, 4)
IBP_DECODE_KERNEL(32, 8)
IBP_DECODE_KERNEL(32, 16)
IBP_DECODE_KERNEL(32, 32)
IBP_DECODE_KERNEL(64, 1)
IBP_DECODE_KERNEL(64, 2)
IBP_DECODE_KERNEL(64, 4)
IBP_DECODE_KERNEL(64, 8)
IBP_DECODE_KERNEL(64, 16)
IBP_DECODE_KERNEL(64, 32)

// ---------------------------------------------------------------------------------------
// Plain gather of raw rows: out[i] = table[index[i]] (row_nbytes bytes each). T is the
// access unit (VW bytes), the widest that divides row_nbytes and both base addresses.
// `lanes` lanes (a power of two <= 32) copy one row, each lane up to four units in flight
// before its stores; for 512-byte rows and 16-byte units a warp moves a row with one load
// and one store instruction per lane. Floor: bytes read / bandwidth (PCIe for a pinned
// host table, HBM for a device one).
template <typename T>
__device__ __forceinline__ void ibp_gather_impl(const u8* table, i64 n_rows, i64 row_nbytes,
                                                const i64* index, i64 n_out, int lanes_i, u8* out,
                                                u64* err) {
  const u32 lanes = (u32)lanes_i;
  const u32 lane = threadIdx.x & (lanes - 1u);
  const u32 group = threadIdx.x / lanes;
  const u32 groups_per_block = blockDim.x / lanes;
  const i64 units = row_nbytes / (i64)sizeof(T);
  for (i64 i = (i64)blockIdx.x * groups_per_block + group; i < n_out;
       i += (i64)gridDim.x * groups_per_block) {
    const i64 r = index[i];
    if (r < 0 || r >= n_rows) {
      if (lane == 0) atomicMin(err + IBP_ERR_INDEX, (u64)i);
      continue;
    }
    const T* s = reinterpret_cast<const T*>(table + r * row_nbytes);
    T* d = reinterpret_cast<T*>(out + i * row_nbytes);
    for (i64 k = lane; k < units; k += 4 * (i64)lanes) {
      const bool h1 = k + lanes < units;
      const bool h2 = k + 2 * (i64)lanes < units;
      const bool h3 = k + 3 * (i64)lanes < units;
      T v0 = s[k];
      T v1 = v0, v2 = v0, v3 = v0;
      if (h1) v1 = s[k + lanes];
      if (h2) v2 = s[k + 2 * (i64)lanes];
      if (h3) v3 = s[k + 3 * (i64)lanes];
      d[k] = v0;
      if (h1) d[k + lanes] = v1;
      if (h2) d[k + 2 * (i64)lanes] = v2;
      if (h3) d[k + 3 * (i64)lanes] = v3;
    }
  }
}

#define IBP_GATHER_KERNEL(VW, T)                                                             \
  extern "C" __global__ void __launch_bounds__(256) ibp_gather_v##VW(                        \
      const u8* table, i64 n_rows, i64 row_nbytes, const i64* index, i64 n_out, int lanes,   \
      u8* out, u64* err) {                                                                   \
    ibp_gather_impl<T>(table, n_rows, row_nbytes, index, n_out, lanes, out, err);            \
  }

IBP_GATHER_KERNEL(1, u8)
IBP_GATHER_KERNEL(2, u16)
IBP_GATHER_KERNEL(4, u32)
IBP_GATHER_KERNEL(8, u64)
IBP_GATHER_KERNEL(16, uint4)
