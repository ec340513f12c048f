// The staged GEMV of few activation rows (dp4a_kernel, and its mma form for 5-8 rows), launched
// by matmul_mma.cu.
#pragma once

#include "backends/cuda/cp_async.cuh"
#include "backends/cuda/intmm_common.cuh"

namespace salvo::cuda::intmm {

// ---- dp4a (few rows) ------------------------------------------------------------------------
// The same arithmetic without the tensor cores, for 1..8 rows, where an m16n8 tile would scale
// 128 sums to use 16 or fewer. A block is a tile of 32 output rows and has one warp per k slice
// (the slices of mma_kernel: warp w takes units w, w + S, ...); lane i owns output row i of the
// tile, computes the integer dot of each step itself (the four "t" shares of the mma layout in
// turn, with dp4a), applies exactly the float steps of mma_kernel in the same order, and the
// warps' partial sums are added in warp order. So both kernels give the same bits, and one
// family serves every R (the bench's and cuda_ops_test's row-invariance checks of variant q8
// compare the two kernels).
//
// Loads: with a lane per output row, reading the weights straight from global memory makes each
// load instruction touch 32 rows with 2..16-byte pieces (L1-wavefront bound, the former version
// of this kernel: no faster than mma). Instead each warp streams its units through shared
// memory: per unit, the 32 rows' bytes are copied with 16-byte cp.async by consecutive lanes
// (each row's piece is contiguous, so 8..15 lanes read one row's run), kDp4aStages - 1 units ahead,
// and each lane then reads its own row's copy. A row's copy sits at a pitch of an odd number of
// 16-byte granules, so the lanes' 16-byte reads (Q4_K, Q5_K) hit distinct banks; the 2-byte
// aligned formats read aligned words and shift them into place. The warps run their pipelines
// independently (no block barrier until the final sum).
//
// The staged kernel's mma form (kMma) keeps those copies and computes 5-8 rows of the k-quants
// on the tensor cores instead: each warp's 32 rows are two m16 tiles read from the stage, its
// activations n8 tiles staged fragment-major (fragment_offset). mma_kernel's threads read their
// 8-16-byte pieces of 16 rows straight from global memory, one dependent round per unit.

// Units per warp in shared memory (one computed, one in flight). Four (a short row's units all
// in flight at once, but 147 KB per 8-warp Q4_K block: one block per SM) measured slower on the
// H200 (session 13, tg128: random 1.5B shape 559 -> 519 tok/s, 7B 270 -> 246).
constexpr int kDp4aStages = 2;

// Alignment of a block's first byte in global memory (rows start at multiples of it too).
template <DType T>
constexpr int block_align() {
  return T == DType::kQ4_K || T == DType::kQ5_K ? 16 : T == DType::kQ4_1 ? 4 : 2;
}

// Bytes of one row's copy of a unit in shared memory: the unit's bytes at their offset within
// the first 16-byte granule (up to 14 for 2-aligned data) plus a word of slack for the shifted
// reads, rounded to an odd number of granules (distinct banks across the 32 rows).
template <DType T>
constexpr int unit_pitch() {
  using F = Fmt<T>;
  const int lead = block_align<T>() == 16 ? 0 : 16 - block_align<T>();
  const int slack = block_align<T>() == 16 ? 0 : 4;
  const int granules = (lead + F::kUnit * F::kBytes + slack + 15) / 16;
  return 16 * (granules % 2 == 1 ? granules : granules + 1);
}

// A stage of a warp: the 32 rows' copies of one unit, then the unit's activations (R rows of
// kUnit * kElems int8) and their Q8Meta ([32-element block][row]).
template <DType T, int R>
struct Dp4aStage {
  static constexpr int kUnitElems = Fmt<T>::kUnit * Fmt<T>::kElems;
  static constexpr int kWeightBytes = 32 * unit_pitch<T>();
  static constexpr int kXBytes = R * kUnitElems;
  static constexpr int kMetaBytes = R * (kUnitElems / 32) * static_cast<int>(sizeof(Q8Meta));
  static constexpr int kBytes = kWeightBytes + kXBytes + kMetaBytes;
};

template <DType T, int R>
constexpr int dp4a_smem_bytes(int warps) {
  return warps * kDp4aStages * Dp4aStage<T, R>::kBytes;
}

// A block's bytes in shared memory, as Fmt::load reads them through the ld_* overloads below
// (`b + k` moves the read position by k bytes; after unrolling every k is a constant).
//
// 16-byte aligned blocks (Q4_K, Q5_K): the block is read as whole granules into registers (one
// conflict-free 16-byte load each), and the fields are taken from them.
template <int kBytes>
struct SmemBlock16 {
  uint4 g[kBytes / 16];
  int k;  // read position
  __device__ __forceinline__ explicit SmemBlock16(const uint8_t* p) : k(0) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) g[i] = reinterpret_cast<const uint4*>(p)[i];
  }
  __device__ __forceinline__ uint32_t word(int at) const {  // at % 4 == 0
    const uint4& v = g[at / 16];
    const int j = (at / 4) % 4;
    return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
  }
};
template <int kBytes>
__device__ __forceinline__ SmemBlock16<kBytes> operator+(SmemBlock16<kBytes> b, int d) {
  b.k += d;
  return b;
}
template <int kBytes>
__device__ __forceinline__ uint32_t ld_u16(const SmemBlock16<kBytes>& b) {
  return (b.word(b.k & ~3) >> (8 * (b.k & 2))) & 0xFFFF;
}
template <int kBytes>
__device__ __forceinline__ uint32_t ld_a2(const SmemBlock16<kBytes>& b) {
  return b.word(b.k);  // used at 4-byte aligned positions only
}
template <int kBytes>
__device__ __forceinline__ uint32_t ld_a4(const SmemBlock16<kBytes>& b) {
  return b.word(b.k);
}
template <int kBytes>
__device__ __forceinline__ uint2 ld_a8(const SmemBlock16<kBytes>& b) {
  return make_uint2(b.word(b.k), b.word(b.k + 4));
}
template <int kBytes>
__device__ __forceinline__ uint4 ld_a16(const SmemBlock16<kBytes>& b) {
  return b.g[b.k / 16];
}

// Blocks at any even alignment: byte k of the block is byte k + off of the aligned words
// w[...] (off in 0..3); a field is read as two aligned words shifted into place (a clamped
// funnel shift: a shift of 32 takes the upper word whole).
struct SmemWords {
  const uint32_t* w;
  uint32_t off8;  // 8 * off
  int k;          // read position, even
};
__device__ __forceinline__ SmemWords operator+(SmemWords b, int d) {
  b.k += d;
  return b;
}
__device__ __forceinline__ uint32_t ld_a2(const SmemWords& b) {
  const int j = b.k / 4;
  return __funnelshift_rc(b.w[j], b.w[j + 1], b.off8 + 8 * (b.k & 3));
}
__device__ __forceinline__ uint32_t ld_a4(const SmemWords& b) { return ld_a2(b); }
__device__ __forceinline__ uint32_t ld_u16(const SmemWords& b) { return ld_a2(b) & 0xFFFF; }

template <bool kSigned>
__device__ __forceinline__ int dp4a(uint32_t a, uint32_t b, int c) {
  int d;
  if constexpr (kSigned) {
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  } else {
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  }
  return d;
}

// All kElems / kK steps of one weight block for the lane's output row, accumulated into acc[r]
// for the R activation rows (the float steps of block_steps, column r). xb: the block's
// activations in the stage (row r at xb + r * x_stride); mb: their Q8Meta (32-element block j,
// row r at mb[j * R + r]).
template <DType T, int R, class Src>
__device__ __forceinline__ void dp4a_block(const Src& src, int blk, const int8_t* xb, int x_stride,
                                           const Q8Meta* mb, float (&acc)[R]) {
  using F = Fmt<T>;
  typename F::Raw raw[4];
  // Q6_K's block by halves, as in mma_stage_block (ptxas: R = 1 190 -> 163 registers, R = 2
  // 210 -> 168, R = 4 192 -> 142, R = 8 197 -> 142).
  constexpr bool kByHalves = T == DType::kQ6_K;
  if constexpr (!kByHalves) {
#pragma unroll
    for (int t = 0; t < 4; ++t) F::load(src, t, raw[t]);
  }
  // Every row's reads are unconditional (a row past n_rows holds a copy of the last row; its
  // sums are never written), so the compiler can issue them ahead of the dp4a chains: a branch
  // per row (`if (r >= n_rows) break`) kept every step waiting on its own loads.
#pragma unroll
  for (int s = 0; s < F::kElems / F::kK; ++s) {
    if constexpr (kByHalves) {
      if (s % 8 == 0) {
#pragma unroll
        for (int t = 0; t < 4; ++t) F::load_half(src, t, s / 8, raw[t]);
      }
    }
    const int es = blk * F::kElems + s * F::kK;
    uint32_t lo[4], hi[4] = {0, 0, 0, 0};
    float dw = 0.0f, mw = 0.0f;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      if constexpr (F::kK == 32) {
        fmt_step<T>(raw[t], s, t, lo[t], hi[t], dw, mw);
      } else {
        F::step(raw[t], s, lo[t], dw);
      }
    }
    const Q8Meta* meta = mb + (s * F::kK / 32) * R;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      // The same address in every lane of the warp (one broadcast read).
      const int8_t* xr = xb + r * x_stride + s * F::kK;
      int c = 0;
      if constexpr (F::kK == 16) {
        const uint4 v = *reinterpret_cast<const uint4*>(xr);
        c = dp4a<false>(lo[0], v.x, c);
        c = dp4a<false>(lo[1], v.y, c);
        c = dp4a<false>(lo[2], v.z, c);
        c = dp4a<false>(lo[3], v.w, c);
      } else {
        const uint4 v0 = *reinterpret_cast<const uint4*>(xr);
        const uint4 v1 = *reinterpret_cast<const uint4*>(xr + 16);
        const uint32_t xw[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          if constexpr (F::kPair8) {  // elements [8t, 8t + 4) and [8t + 4, 8t + 8)
            c = dp4a<F::kSigned>(lo[t], xw[2 * t], c);
            c = dp4a<F::kSigned>(hi[t], xw[2 * t + 1], c);
          } else {  // elements [4t, 4t + 4) and [16 + 4t, 20 + 4t)
            c = dp4a<F::kSigned>(lo[t], xw[t], c);
            c = dp4a<F::kSigned>(hi[t], xw[4 + t], c);
          }
        }
      }
      const Q8Meta m = meta[r];
      int xs;
      if constexpr (F::kK == 16) {
        xs = (es / 16) % 2 ? m.sum_hi : m.sum_lo;
      } else {
        xs = m.sum_lo + m.sum_hi;
      }
      const float dxs = __fmul_rn(m.d, static_cast<float>(xs));
      const int isum = c - F::kOffset * xs;
      acc[r] = __fmaf_rn(__fmul_rn(dw, m.d), static_cast<float>(isum), acc[r]);
      if constexpr (F::kMin) acc[r] = __fmaf_rn(mw, dxs, acc[r]);
    }
  }
}

// A shared-memory copy of a block for Fmt::load (plain loads: __ldg reads global memory only).
struct SmemPtr {
  const uint8_t* p;
};
__device__ __forceinline__ SmemPtr operator+(SmemPtr b, int d) { return {b.p + d}; }
__device__ __forceinline__ uint32_t ld_a2(SmemPtr b) {
  const uint16_t* s = reinterpret_cast<const uint16_t*>(b.p);
  return static_cast<uint32_t>(s[0]) | (static_cast<uint32_t>(s[1]) << 16);
}
__device__ __forceinline__ uint32_t ld_a4(SmemPtr b) {
  return *reinterpret_cast<const uint32_t*>(b.p);
}
__device__ __forceinline__ uint2 ld_a8(SmemPtr b) { return *reinterpret_cast<const uint2*>(b.p); }
__device__ __forceinline__ uint4 ld_a16(SmemPtr b) { return *reinterpret_cast<const uint4*>(b.p); }
__device__ __forceinline__ uint16_t ld_u16(SmemPtr b) {
  return *reinterpret_cast<const uint16_t*>(b.p);
}

// The staged kernel's mma form (kMma, 5-8 rows of the k-quants): the warp's 32 output rows are
// two m16 tiles and its R = 8 NT activation rows NT n8 tiles. The unit's activations sit in the
// stage fragment-major: the B fragment of (step s, n tile nt) is 32 lanes' 8 (k32 steps) or 4
// (k16) consecutive bytes, so a lane's read is one conflict-free load. Byte offset of the 16-byte
// piece c (elements [16c, 16c + 16)) of activation row r within the unit's stage:
template <DType T, int NT>
__device__ __forceinline__ int fragment_offset(int r, int c) {
  using F = Fmt<T>;
  static_assert(F::kPair8 || F::kK == 16, "k32 steps pair bytes [8t, 8t + 8)");
  if constexpr (F::kK == 32) return 16 * (((c / 2) * NT + r / 8) * 16 + 2 * (r % 8) + c % 2);
  return 16 * ((c * NT + r / 8) * 8 + r % 8);
}

// All steps of one staged block for the lane's rows g, g + 8, 16 + g, 24 + g of the tile (rows[i]
// holds row 8i + g's copy) and acc[(mt NT + nt) 4 + i], the m16n8 accumulator i of m tile mt and
// n tile nt. The float steps of block_steps in the same order, so the bits are those of the other
// kernels.
template <DType T, int NT>
__device__ __forceinline__ void mma_stage_block(const SmemPtr (&rows)[4], const int8_t* xs,
                                                const Q8Meta* ms, int lane, float (&acc)[8 * NT]) {
  using F = Fmt<T>;
  constexpr int R = 8 * NT;
  const int t = lane % 4;
  typename F::Raw raw[4];
  // Q6_K's four rows hold 68 words whole; by halves 36 (ptxas at R = 8: 186 registers whole).
  constexpr bool kByHalves = T == DType::kQ6_K;
  if constexpr (!kByHalves) {
#pragma unroll
    for (int i = 0; i < 4; ++i) F::load(rows[i], t, raw[i]);
  }
#pragma unroll
  for (int s = 0; s < F::kElems / F::kK; ++s) {
    if constexpr (kByHalves) {
      if (s % 8 == 0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) F::load_half(rows[i], t, s / 8, raw[i]);
      }
    }
    uint32_t a[2][4];
    float dw[2][2], mw[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      mw[mt][0] = mw[mt][1] = 0.0f;
      if constexpr (F::kK == 32) {
        fmt_step<T>(raw[2 * mt], s, t, a[mt][0], a[mt][2], dw[mt][0], mw[mt][0]);
        fmt_step<T>(raw[2 * mt + 1], s, t, a[mt][1], a[mt][3], dw[mt][1], mw[mt][1]);
      } else {
        F::step(raw[2 * mt], s, a[mt][0], dw[mt][0]);
        F::step(raw[2 * mt + 1], s, a[mt][1], dw[mt][1]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      int c[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
      if constexpr (F::kK == 16) {
        const uint32_t b0 =
            *reinterpret_cast<const uint32_t*>(xs + ((s * NT + nt) * 32 + lane) * 4);
        mma_k16_u8(c[0], a[0][0], a[0][1], b0);
        mma_k16_u8(c[1], a[1][0], a[1][1], b0);
      } else {
        const uint2 b = *reinterpret_cast<const uint2*>(xs + ((s * NT + nt) * 32 + lane) * 8);
        mma_k32<F::kSigned>(c[0], a[0][0], a[0][1], a[0][2], a[0][3], b.x, b.y);
        mma_k32<F::kSigned>(c[1], a[1][0], a[1][1], a[1][2], a[1][3], b.x, b.y);
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const Q8Meta m = ld_meta(ms + (s * F::kK / 32) * R + 8 * nt + 2 * t + j);
        const float dx = m.d;
        int xs_sum;
        if constexpr (F::kK == 16) {
          xs_sum = s % 2 ? m.sum_hi : m.sum_lo;
        } else {
          xs_sum = m.sum_lo + m.sum_hi;
        }
        const float dxs = __fmul_rn(dx, static_cast<float>(xs_sum));
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {  // output rows g and g + 8 of the m tile
            float& out = acc[(mt * NT + nt) * 4 + 2 * h + j];
            const int isum = c[mt][2 * h + j] - F::kOffset * xs_sum;
            out = __fmaf_rn(__fmul_rn(dw[mt][h], dx), static_cast<float>(isum), out);
            if constexpr (F::kMin) out = __fmaf_rn(mw[mt][h], dxs, out);
          }
        }
      }
    }
  }
}

// Blocks per SM the staged kernel's registers must allow (its shared memory allows two for R = 8
// with kMma, which then needs <= 128 registers; Q6_K fits since mma_stage_block loads its
// blocks by halves: 186 registers before, one block per SM). The same for every format.
template <int R, bool kMma>
constexpr int staged_min_blocks() {
  return kMma && R == 8 ? 2 : 1;
}

template <DType T, int R, bool kTiled, bool kMma>
__global__ void __launch_bounds__(32 * kMaxSlices, staged_min_blocks<R, kMma>())
    dp4a_kernel(const __grid_constant__ MmaGroup grp) {
  static_assert(!kMma || (R % 8 == 0 && Fmt<T>::kUnit == 1), "mma: n8 tiles of one-block units");
  using F = Fmt<T>;
  constexpr int kPitch = unit_pitch<T>(), kGranules = kPitch / 16;
  using Stage = Dp4aStage<T, R>;
  extern __shared__ uint4 dp4a_smem[];
  int tile;
  const MmaArgs& p = group_part(grp, tile);
  const int n_warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int o_raw = tile * 32 + lane;
  const int n_blocks = p.n_in / F::kElems;
  const int n_units = (n_blocks + F::kUnit - 1) / F::kUnit;
  // This warp's units: slice, slice + n_slices, ... (my_units of them).
  const int n_slices = n_warps * grp.splits, slice = my_slice(n_warps);
  const int my_units = slice < n_units ? (n_units - slice + n_slices - 1) / n_slices : 0;
  uint8_t* const buf = reinterpret_cast<uint8_t*>(dp4a_smem) +
                       static_cast<size_t>(warp) * kDp4aStages * Stage::kBytes;
  // Rows past n_out (a partial last tile) copy the last row and are not written.
  const uint8_t* const w_tile = weight_row<T, kTiled>(p, tile * 32);
  const int rows_here = min(32, p.n_out - tile * 32);
  constexpr int kUnitBytes = F::kUnit * F::kBytes;
  // The first byte of unit u of the tile's row r (tiled, kUnit is 1: each kTileRows rows'
  // units are one run of kTileRows * kUnitBytes).
  static_assert(kTileRows == 32, "a dp4a tile is one tile of tile_weights()");
  auto unit_row = [&](int r, int u) {
    if constexpr (kTiled) {
      return w_tile + (static_cast<int64_t>(u) * kTileRows + r) * kUnitBytes;
    } else {
      return w_tile + static_cast<int64_t>(r) * p.row_bytes + static_cast<int64_t>(u) * kUnitBytes;
    }
  };

  // Copies unit i of this warp (all 32 rows) into stage i % kDp4aStages: slot q = lane + 32 j
  // is granule q % kGranules of row q / kGranules, so consecutive lanes read consecutive
  // granules of a row. A row's piece spans the granules from its first byte's granule to its
  // last byte's (the lead bytes before it and the tail after it are not read). The unit's
  // activations come in the same copy group: read from global memory in the loop, each step
  // waited on its own loads (ncu on the H200: long-scoreboard stalls, ~2 warps a scheduler).
  auto stage_x = [&](int i) {
    const int u = slice + i * n_slices;
    const int blocks = min(F::kUnit, n_blocks - u * F::kUnit);
    uint8_t* const dst = buf + (i % kDp4aStages) * Stage::kBytes;
    // Activation rows past n_rows copy the last row.
    const int e0 = u * Stage::kUnitElems, elems = blocks * F::kElems;
    int8_t* const x_dst = reinterpret_cast<int8_t*>(dst + Stage::kWeightBytes);
#pragma unroll
    for (int q = lane; q < R * (Stage::kUnitElems / 16); q += 32) {
      const int r = q / (Stage::kUnitElems / 16), c = q % (Stage::kUnitElems / 16);
      const int8_t* src = p.xq + static_cast<int64_t>(min(r, p.n_rows - 1)) * p.n_in + e0 + 16 * c;
      int at = r * Stage::kUnitElems + 16 * c;
      if constexpr (kMma) at = fragment_offset<T, R / 8>(r, c);
      if (16 * c < elems) cp_async16_ca(x_dst + at, src);
    }
    Q8Meta* const m_dst = reinterpret_cast<Q8Meta*>(dst + Stage::kWeightBytes + Stage::kXBytes);
#pragma unroll
    for (int q = lane; q < R * (Stage::kUnitElems / 32); q += 32) {
      const int j = q / R, r = q % R;
      const Q8Meta* src =
          p.meta + static_cast<int64_t>(e0 / 32 + j) * p.meta_stride + min(r, p.n_rows - 1);
      if (32 * j < elems) cp_async8(m_dst + q, src);
    }
  };
  auto stage_weights = [&](int i) {
    const int u = slice + i * n_slices;
    const int bytes = min(F::kUnit, n_blocks - u * F::kUnit) * F::kBytes;
    uint8_t* const dst = buf + (i % kDp4aStages) * Stage::kBytes;
    if constexpr (kTiled && block_align<T>() == 16 && kPitch == kUnitBytes) {
      // The run of 32 whole-granule rows is the stage's layout as it is: one straight copy
      // (a partial last tile reads tile_weights()' zero rows, which are never written out).
      // (This copy with a choice of run per granule and a runtime full-tile check, left from
      // 16-row runs, measured the 7B gate matrix at 17.4 us against 15.7.)
      const uint8_t* const run = unit_row(0, u);
#pragma unroll
      for (int q = lane; q < 32 * kGranules; q += 32) cp_async16(dst + 16 * q, run + 16 * q);
    } else {
#pragma unroll
      for (int q = lane; q < 32 * kGranules; q += 32) {
        const int row = q / kGranules, g = q % kGranules;
        const uint8_t* const first = unit_row(min(row, rows_here - 1), u);
        const uintptr_t a0 = reinterpret_cast<uintptr_t>(first) & ~static_cast<uintptr_t>(15);
        const uintptr_t end = reinterpret_cast<uintptr_t>(first) + bytes;
        const uintptr_t src = a0 + 16 * static_cast<uintptr_t>(g);
        if (src < end) cp_async16(dst + row * kPitch + 16 * g, reinterpret_cast<const void*>(src));
      }
    }
  };
  auto stage = [&](int i) {
    stage_x(i);
    stage_weights(i);
  };

  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    // The weights are never written by a kernel, so the first units' copies start before the
    // wait for the previous kernel and overlap its tail; their activations come after the wait.
    // (H200, session 21, random shapes, tg128: Qwen2.5-1.5B 840-855 -> 898-905 tok/s, 7B 430 ->
    // 453.)
#pragma unroll
  for (int i = 0; i < kDp4aStages - 1; ++i) {
    if (grp.early_weights && i < my_units) stage_weights(i);
  }
  pdl_enter();
#pragma unroll
  for (int i = 0; i < kDp4aStages - 1; ++i) {
    if (i < my_units) {
      if (!grp.early_weights) stage_weights(i);
      stage_x(i);
    }
    cp_async_commit();
  }
  for (int i = 0; i < my_units; ++i) {
    // Every lane is done with unit i - 1, whose stage the next copy overwrites.
    __syncwarp();
    if (i + kDp4aStages - 1 < my_units) stage(i + kDp4aStages - 1);
    cp_async_commit();
    cp_async_wait<kDp4aStages - 1>();  // this lane's copies of unit i have landed
    __syncwarp();                      // and every lane's
    const int u = slice + i * n_slices;
    const uint8_t* const stage_i = buf + (i % kDp4aStages) * Stage::kBytes;
    const uint8_t* const row_copy = stage_i + lane * kPitch;
    const int8_t* const x_copy = reinterpret_cast<const int8_t*>(stage_i + Stage::kWeightBytes);
    const Q8Meta* const m_copy =
        reinterpret_cast<const Q8Meta*>(stage_i + Stage::kWeightBytes + Stage::kXBytes);
    // Byte offset of row r's unit within its copy's first granule.
    auto lead_of = [&](int r) {
      return static_cast<int>(reinterpret_cast<uintptr_t>(unit_row(min(r, rows_here - 1), u)) & 15);
    };
    if constexpr (kMma) {
      SmemPtr rows[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = 8 * i + lane / 4;
        rows[i] = {stage_i + r * kPitch + lead_of(r)};
      }
      mma_stage_block<T, R / 8>(rows, x_copy, m_copy, lane, acc);
      continue;
    }
    const int lead = lead_of(lane);
#pragma unroll
    for (int b = 0; b < F::kUnit; ++b) {
      const int blk = u * F::kUnit + b;
      if (blk >= n_blocks) break;
      const int8_t* const xb = x_copy + b * F::kElems;
      const Q8Meta* const mb = m_copy + b * (F::kElems / 32) * R;
      if constexpr (block_align<T>() == 16) {
        dp4a_block<T, R>(SmemBlock16<F::kBytes>(row_copy + b * F::kBytes), blk, xb,
                         Stage::kUnitElems, mb, acc);
      } else {
        const int at = lead + b * F::kBytes;  // the block's first byte in row_copy
        const SmemWords src{reinterpret_cast<const uint32_t*>(row_copy) + at / 4,
                            static_cast<uint32_t>(8 * (at % 4)), 0};
        dp4a_block<T, R>(src, blk, xb, Stage::kUnitElems, mb, acc);
      }
    }
  }
  cp_async_wait<0>();
  __syncwarp();

  // The warps' sums, added in warp order; each warp leaves its R x 32 values in its own (now
  // idle) stages, so the kernel needs no further shared memory.
  static_assert(R * 32 * sizeof(float) <= Stage::kBytes, "a warp's sums fit its stage");
  auto warp_sums = [&](int w) {
    return reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(dp4a_smem) +
                                    static_cast<size_t>(w) * kDp4aStages * Stage::kBytes);
  };
  if (warp > 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) warp_sums(warp)[r * 32 + lane] = acc[r];
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      for (int w = 1; w < n_warps; ++w) acc[r] = __fadd_rn(acc[r], warp_sums(w)[r * 32 + lane]);
    }
  }
  if (grp.splits > 1) {
    if (warp == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r) split_tile(grp, blockIdx.z)[r * 32 + lane] = acc[r];
    }
    if (!split_arrive(grp)) return;
    if (warp == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] = split_sum(grp, r * 32 + lane);
    }
  }
  if (warp != 0) return;
#pragma unroll
  for (int k = 0; k < R; ++k) {
    // kMma: accumulator i = k % 4 of m tile mt, n tile nt ((mt NT + nt) 4 + i = k).
    constexpr int kNt = kMma ? R / 8 : 1;  // n tiles (the dp4a form has none)
    const int mt = k / 4 / kNt, nt = k / 4 % kNt, i = k % 4;
    const int row = kMma ? 8 * nt + 2 * (lane % 4) + i % 2 : k;
    const int o = kMma ? tile * 32 + 16 * mt + lane / 4 + 8 * (i / 2) : o_raw;
    if (row >= p.n_rows) {
      if constexpr (kMma) continue;
      break;
    }
    float v = acc[k];
    if (o < p.n_out) {
      if (p.bias != nullptr) v = __fadd_rn(v, p.bias[o]);
      p.y[static_cast<int64_t>(row) * p.n_out + o] = v;
    }
  }
}

}  // namespace salvo::cuda::intmm
